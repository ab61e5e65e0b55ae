#!/bin/bash
# set -e with a failure in the third iteration of a loop of cp commands.
set -e
mkdir -p out
echo a > a.txt; echo b > b.txt
for f in a.txt b.txt c.txt d.txt; do
  cp $f out/
  echo "copied $f" >> out/log.txt
done
echo finished >> out/log.txt
