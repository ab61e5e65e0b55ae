#!/bin/bash
# Positional parameters $1/$2, $#, shift, "$@" and $* in and out of quotes, set --.
# args: in dir "two words" last
src=$1; dst=$2
mkdir -p $src/$dst
echo "$#" > count.txt
for w in "$@"; do echo "[$w]"; done
for w in $@; do echo "<$w>"; done
for w in "$*"; do echo "{$w}"; done
for w in $*; do echo "($w)"; done
shift 2
echo "after shift: $# $1"
touch "$src/$dst/$1.txt"
set -- x y
echo "$1/$2" > reset.txt
