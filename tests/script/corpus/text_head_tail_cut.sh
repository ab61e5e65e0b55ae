#!/bin/bash
# head/tail/cut slicing of a model list and station table into per-part files.
# data: text
head -n 2 models.txt > first_two.txt
tail -n 2 models.txt > last_two.txt
tail -n +3 stations.csv | head -n 2 > middle.csv
cut -c1-4 models.txt > prefixes.txt
cut -d_ -f1 models.txt | sort -u > centres.txt
paste -d, first_two.txt last_two.txt > paired.csv
head -c 20 stations.csv > bytes.txt
cat first_two.txt last_two.txt | sort | tr 'a-z' 'A-Z'
