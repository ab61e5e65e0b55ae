#!/bin/bash
# $? after builtins and tests (known statically), saved into variables and files.
true; a=$?
false; b=$?
[ 1 -eq 2 ]; c=$?
[ abc = abc ]; d=$?
echo "$a $b $c $d" > statuses.txt
f() { return 9; }
f; echo "f gave $?" >> statuses.txt
cat statuses.txt
