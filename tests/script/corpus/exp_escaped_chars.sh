#!/bin/bash
# Backslash escapes in words: $m\_tas, \$, \", \\ and escaped spaces in file names.
m=cnrm_cm3
echo $m\_tas $m\.nc \$m "\$m" \"q\" a\\b > esc.txt
touch file\ with\ spaces.txt
echo data > "$m\_out.txt"
ls *\ * *_out.txt
cat esc.txt
