#!/bin/bash
# Column sums and per-group statistics with awk associative arrays, written to a report.
# data: text
tail -n +2 stations.csv | awk -F, '{n[$2]++; e[$2]+=$5} END {for (k in n) printf "%s %d %d\n", k, n[k], e[k]}' | sort > groups.txt
awk -F, 'NR > 1 {s += $5} END {print "total elevation", s}' stations.csv > total.txt
awk '{print NR": "$0}' models.txt > numbered.txt
cat groups.txt total.txt
