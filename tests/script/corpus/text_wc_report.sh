#!/bin/bash
# Line and word counts of made files printed with their names (wc file..., md5sum file).
# data: text
sort models.txt > sorted_models.txt
cut -d, -f2 stations.csv > names.txt
wc -l sorted_models.txt names.txt
md5sum sorted_models.txt > sums.txt
head -n 2 sorted_models.txt names.txt
grep -H Oslo names.txt stations.csv
