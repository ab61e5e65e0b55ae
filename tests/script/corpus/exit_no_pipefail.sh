#!/bin/bash
# Without pipefail a pipeline's status is its last command's, so set -e keeps going.
set -e
cat missing.txt 2>/dev/null | sort > empty.txt
echo reached > after.txt
cat after.txt | grep -q nothing_here | true
echo end >> after.txt
