#!/bin/bash
# Observation report with awk: skip missing values, mean, min/max, formatted with printf.
# data: text
awk '$2 != -999 {print $1, $2}' obs.txt > valid.txt
awk '{s += $2; n++} END {printf "%.2f\n", s / n}' valid.txt > mean.txt
sort -k2,2n valid.txt | head -n 1 | cut -d' ' -f1 > coldest_year.txt
sort -k2,2nr valid.txt | head -1 > warmest.txt
grep -c missing obs.txt > n_missing.txt
printf 'mean=%s missing=%s\n' "$(cat mean.txt)" "$(cat n_missing.txt)"
