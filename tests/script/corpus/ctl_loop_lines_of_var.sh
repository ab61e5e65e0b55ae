#!/bin/bash
# Looping over the lines of a variable with a here-string and over words of $(cat file).
# data: text
vars="tas
pr
psl"
while read -r v; do
  echo "variable $v" > "v_$v.txt"
done <<< "$vars"
for y in $(cat years.txt); do
  echo "$y" >> years_seen.txt
done
ls v_*.txt
