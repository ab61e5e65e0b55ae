#!/bin/bash
# Outputs written under temporary names and renamed with mv at the end of each step.
# data: models=2
for f in sresalb_*.nc; do
  m=${f#sresalb_}
  ncwa -O -a lat,lon $f part.tmp.nc
  mv part.tmp.nc gm_$m
  ncra -O -d time,0,11 gm_$m part.tmp.nc
  mv -f part.tmp.nc yr1_$m
done
mkdir -p final
mv gm_*.nc final/
ls final yr1_*
