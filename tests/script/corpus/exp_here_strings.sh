#!/bin/bash
# Here-strings feeding text filters and read: <<< "$var" with spaces and several lines.
list="b c a"
tr ' ' '\n' <<< "$list" | sort > sorted.txt
wc -w <<< "$list" > count.txt
read -r x y z <<< "$list"
echo "$z$y$x" > rev.txt
grep -c . <<< "one
two" > lines.txt
cat sorted.txt rev.txt
