#!/bin/bash
# The classic mistake `sort f > f`: bash truncates the output before sort reads it, so the
# file ends up empty; a renaming compiler must not "fix" it.
# data: text
cp years.txt y.txt
sort -r y.txt > y.txt
cp models.txt m.txt
tr a-z A-Z < m.txt > m.txt
wc -c y.txt m.txt
