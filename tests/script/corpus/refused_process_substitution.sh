#!/bin/bash
# Process substitution comparing two sorted lists: a construct shoal refuses.
# expect: refused
# data: text
cut -d, -f2 stations.csv > names.txt
diff <(sort names.txt) <(sort -u names.txt) > dups.diff || true
wc -l < dups.diff
