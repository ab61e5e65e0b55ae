#!/bin/bash
# Glob patterns over made files: *, ?, [abc], [!x], [0-9], in subdirectories and quoted.
mkdir -p d1 d2
touch d1/a1.txt d1/b2.txt d1/c3.log d2/a9.txt
touch x1 x2 y1
echo d*/a*.txt > g1.txt
echo d1/[ab]?.txt >> g1.txt
echo d1/[!a]*.* >> g1.txt
echo ?1 >> g1.txt
echo [xy][0-9] >> g1.txt
echo "d*/quoted" d1/*.none >> g1.txt
cat g1.txt
