#!/bin/bash
# while true with a break on a counter, continue that skips some iterations.
n=0
while true; do
  n=$((n + 1))
  if [ $n -gt 6 ]; then break; fi
  if [ $((n % 2)) -eq 0 ]; then continue; fi
  echo "odd $n" >> odds.txt
done
echo "stopped at $n"
