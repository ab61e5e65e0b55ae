#!/bin/bash
# unset variables and functions, empty strings as words, [ -z ] and [ -n ] tests.
a=value
unset a
echo "[${a}] [${a-unset}]" > u.txt
b=""
for w in "$b" $b x; do echo "word:[$w]" >> u.txt; done
f() { echo f; }
unset -f f
[ -z "$a" ] && echo "a empty" >> u.txt
[ -n "$b" ] || echo "b empty" >> u.txt
set -- "" "two"
echo "$# args, first [$1]" >> u.txt
cat u.txt
