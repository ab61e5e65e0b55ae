#!/bin/bash
# A redirection target computed from a file the script writes: refused, not guessed.
# expect: refused
# data: text
sed -n 's/^region=//p' params.txt > region.txt
sort -r region.txt > region2.txt
echo "result" > "out_$(cat region2.txt).txt"
