#!/bin/bash
# cp and mv of a file onto itself fail in bash ("are the same file"); the script goes on.
# data: text
cp models.txt list.txt
cp list.txt list.txt || echo "cp onto itself failed"
mv list.txt ./list.txt || echo "mv onto itself failed"
cat list.txt | wc -l
