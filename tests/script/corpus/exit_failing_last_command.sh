#!/bin/bash
# Without set -e the script's status is the last command's: a failing grep at the end.
# data: text
grep -c Oslo stations.csv > count.txt
cp models.txt list.txt
grep -q Paris stations.csv
