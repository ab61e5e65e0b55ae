#!/bin/bash
# while read over a list of models from a file present at start, with a counter.
# data: models=4 text
n=0
while read -r m; do
  ncwa -O -a lat,lon sresalb_$m.nc gm_$m.nc
  n=$((n + 1))
done < models.txt
echo "$n models processed" > summary.txt
nces -O gm_*.nc gm_ens.nc
