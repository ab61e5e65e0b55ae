#!/bin/bash
# while and until loops with counters, writing one file per iteration.
i=0
while [ $i -lt 4 ]; do
  echo "iteration $i" > iter_$i.txt
  i=$((i + 1))
done
j=10
until [ $j -le 6 ]; do
  j=$((j - 2))
  echo $j >> until.txt
done
k=0
while (( k < 3 )); do (( k++ )); done
echo "i=$i j=$j k=$k"
