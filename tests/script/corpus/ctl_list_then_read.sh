#!/bin/bash
# A file list written by the script and then read line by line (while read < list).
# data: models=3
printf '%s\n' sresalb_*.nc > inputs.lst
while read -r f; do
  ncwa -O -a lat,lon "$f" "gm_$f"
done < inputs.lst
wc -l < inputs.lst
