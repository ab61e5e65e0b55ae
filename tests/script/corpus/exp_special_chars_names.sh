#!/bin/bash
# File names with dots, dashes, plus, commas, equals and spaces made and globbed.
touch 'run-1.v2.txt' 'a+b.txt' 'k=v.txt' 'x,y.txt' 'two words.txt'
for f in *.txt; do
  cp "$f" "copy of $f"
done
ls > listing.txt
echo *,*.txt > commas.txt
rm -- 'a+b.txt'
ls copy* | wc -l
