#!/bin/bash
# set -e does not stop on failures in if conditions, || lists, ! and non-last && parts.
# data: text
set -e
if grep -q Paris stations.csv; then echo yes; else echo no; fi
grep -q Paris stations.csv || echo "or branch"
! grep -q Paris stations.csv
grep -q Paris stations.csv && echo never
echo "still running" > alive.txt
false
echo unreachable > dead.txt
