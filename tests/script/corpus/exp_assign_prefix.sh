#!/bin/bash
# Assignments before a command (VAR=x cmd) only for that command; export for later ones.
# data: text
LC_ALL=C sort stations.csv > sorted_c.csv
TZ=UTC date -d @86400 +%F > day.txt
export REGION=nordic
echo "$REGION" > region.txt
X=1 Y=2
echo "$X$Y" > xy.txt
awk -v r="$REGION" 'BEGIN{print "awk sees " r}' > awk.txt
cat day.txt xy.txt
