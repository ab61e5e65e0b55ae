#!/bin/bash
# tr case mapping and deletion, wc -l/-w/-c, in pipes and with input redirection.
# data: text
tr a-z A-Z < models.txt > upper.txt
tr -d '_' < models.txt > nounder.txt
tr ',' '\t' < stations.csv > stations.tsv
wc -w < obs.txt > words.txt
wc -c models.txt | awk '{print $1}' > chars.txt
cat models.txt | tr '\n' ' ' > oneline.txt
echo >> oneline.txt
wc -l *.txt | tail -n 1
