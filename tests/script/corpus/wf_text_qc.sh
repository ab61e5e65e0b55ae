#!/bin/bash
# Quality control of an observation list: flags, counts, a cleaned file and a QC report.
# data: text
set -u
in=obs.txt
total=$(wc -l < $in)
grep -v -- '-999' $in > clean.txt
bad=$(grep -c -- '-999' $in)
good=$((total - bad))
awk '{print $1}' clean.txt > years_ok.txt
{
  echo "QC report for $in"
  echo "total=$total good=$good bad=$bad"
  printf 'ratio=%d%%\n' $((100 * good / total))
} > qc.txt
if [ $bad -gt 0 ]; then
  grep -- '-999' $in | cut -d' ' -f1 | tr '\n' ' ' > missing_years.txt
fi
cat qc.txt
