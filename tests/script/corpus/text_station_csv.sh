#!/bin/bash
# Station table cleanup: header strip, cut columns, sort -u, uniq, wc, and a summary file.
# data: text
tail -n +2 stations.csv > body.csv
cut -d, -f2 body.csv | sort | uniq > names.txt
cut -d, -f1,2 body.csv | sort -t, -k1,1n -u > by_id.csv
sort -t, -k5,5n body.csv | head -n 2 > lowest.csv
wc -l < names.txt > n_names.txt
sort body.csv | uniq -d > duplicates.csv
echo "stations: $(wc -l < by_id.csv)" > summary.txt
rm body.csv
