#!/bin/bash
# File names with spaces from a data directory, iterated with a quoted glob loop.
# data: spaces
mkdir -p "processed files"
for f in "input data"/*.txt; do
  name=$(basename "$f" .txt)
  sort -r "$f" > "processed files/$name sorted.txt"
  wc -l < "$f" > "processed files/$name.count"
done
ls "processed files"
cat "processed files"/*.count
