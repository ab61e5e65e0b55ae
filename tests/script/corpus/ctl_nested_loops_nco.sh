#!/bin/bash
# Nested loops over models and seasons producing per-model per-season means and a table.
# data: models=2
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  for s in 0 3 6 9; do
    ncra -O -d time,$s,$((s + 2)) $f s${s}_$m.nc
  done
  ncrcat -O s0_$m.nc s3_$m.nc s6_$m.nc s9_$m.nc seasons_$m.nc
  rm s?_$m.nc
  echo "$m 4 seasons" >> table.txt
done
nces -O seasons_*.nc seasons_ens.nc
