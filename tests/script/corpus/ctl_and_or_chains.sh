#!/bin/bash
# && and || chains with real commands succeeding and failing, and groups.
# data: text
grep -q Oslo stations.csv && echo "has Oslo" > found.txt
grep -q Paris stations.csv && echo "has Paris" >> found.txt
grep -q Paris stations.csv || echo "no Paris" >> found.txt
mkdir -p out && cp models.txt out/ && echo copied > out/flag.txt
false || true
cat missing.txt 2>/dev/null || { echo "fallback"; echo "fb" > fb.txt; }
[ -f out/flag.txt ] && [ -s models.txt ] && echo "both"
