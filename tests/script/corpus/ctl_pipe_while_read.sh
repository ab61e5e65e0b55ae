#!/bin/bash
# A pipeline feeding while read (runs in a subshell): per-line files, and a count afterwards.
# data: text
tail -n +2 stations.csv | sort -u | while IFS=, read -r id name lat lon elev; do
  echo "$lat $lon $elev" > "station_$id.txt"
done
ls station_*.txt | wc -l
cat station_1.txt
