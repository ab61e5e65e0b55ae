#!/bin/bash
# sort with -n, -r, -k, -t, -u, -o in place, and uniq -c counts.
# data: text
sort -t, -k3,3nr stations.csv -o by_lat.csv
sort -n years.txt -r > years_desc.txt
cut -d' ' -f3 obs.txt | sort | uniq -c | sed 's/^ *//' > status_counts.txt
sort -u stations.csv > unique.csv
cp years.txt y.txt
sort -rn y.txt -o y.txt
cat y.txt
