#!/bin/bash
# Headers and values through ncdump into text reports with grep, sed and awk.
# data: models=2
for f in sresalb_*.nc; do
  ncdump -h $f | grep -E '^\s+(float|double)' | awk '{print $2}' > ${f%.nc}.vars
done
cat *.vars | sort | uniq -c | awk '{print $2, $1}' > var_counts.txt
ncdump -v lat sresalb_ccma_cgcm3_1.nc | sed -n '/^data:/,$p' > lat_dump.txt
grep -h source sresalb_*.nc 2>/dev/null | wc -l > grep_binary.txt
ncdump -h sresalb_ncar_ccsm3_0.nc | head -n 3 | tail -n 1 > third_line.txt
