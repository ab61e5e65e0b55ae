#!/bin/bash
# seq-driven loops writing numbered files, -w padding, and a join of their contents.
for i in $(seq 1 5); do
  echo "chunk $i" > part_$i.txt
done
for i in $(seq -w 8 11); do
  echo "padded $i" > pad_$i.txt
done
cat part_*.txt > parts.txt
cat pad_*.txt | sort -r > pads.txt
seq 3 -1 1 | tr '\n' ',' > countdown.txt
ls
