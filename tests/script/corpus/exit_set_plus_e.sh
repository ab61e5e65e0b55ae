#!/bin/bash
# set -e turned off with set +e around a command expected to fail, then on again.
# data: text
set -e
cp models.txt a.txt
set +e
grep -q Paris stations.csv
rc=$?
set -e
echo "grep status $rc" > rc.txt
cp a.txt b.txt
