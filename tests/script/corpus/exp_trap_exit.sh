#!/bin/bash
# trap ... EXIT cleans up a temporary file and writes a marker when the script ends.
trap 'rm -f scratch.tmp; echo "cleaned" > cleanup.txt' EXIT
echo "working" > scratch.tmp
sort scratch.tmp > result.txt
echo "body done"
