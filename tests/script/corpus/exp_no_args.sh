#!/bin/bash
# "$@" and $* with no arguments at all: loops that run zero times and empty words.
for a in "$@"; do echo "arg $a" >> args.txt; done
for a in $*; do echo "word $a" >> args.txt; done
n=0
for a in "$@"; do n=$((n+1)); done
echo "n=$n #=$#" > count.txt
printf '[%s]\n' "$@" > printed.txt
printf '<%s>\n' "$*" >> printed.txt
echo "${1:-none}" "${2-unset}"
ls
