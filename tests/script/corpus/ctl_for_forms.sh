#!/bin/bash
# All for-loop forms: over words, a glob, seq, brace range, C-style; nested, with break/continue.
for v in tas pr; do echo "$v" >> vars.txt; done
for i in {1..3}; do echo "brace $i" >> loops.txt; done
for i in $(seq 2 2 6); do echo "seq $i" >> loops.txt; done
for ((i = 0; i < 3; i++)); do echo "c $i" >> loops.txt; done
for f in *.txt; do echo "glob $f"; done
for a in x y; do
  for b in 1 2 3; do
    [ $b -eq 2 ] && continue
    [ $a = y ] && break 2
    echo "$a$b" >> pairs.txt
  done
done
cat pairs.txt
