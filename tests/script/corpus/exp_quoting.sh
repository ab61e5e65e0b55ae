#!/bin/bash
# Quote removal: single, double, $'..', backslashes, and quotes inside expansions.
v='a b'
echo 'single $v' "double $v" $'ansi\ttab' back\ slash > q.txt
echo "nested '$v'" '"lit"' "\$v \"q\"" >> q.txt
echo "${v:-"x y"}" ${v:+"alt word"} >> q.txt
w="*.txt"
echo "$w" > pattern.txt
echo $w > glob.txt
echo "a""b"'c'd > cat.txt
