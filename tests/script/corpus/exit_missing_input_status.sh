#!/bin/bash
# Reading files removed earlier (one made by the script, one present at start): the programs'
# own error messages, and grep's status 2 as the script's exit status.
# data: text
cp obs.txt work.txt
sort work.txt > sorted.txt
rm work.txt
cat work.txt > copy.txt
rm -f params.txt
grep -q region params.txt
