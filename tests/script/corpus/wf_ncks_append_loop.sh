#!/bin/bash
# Building one file by appending a variable per model with ncks -A (first append creates it).
# data: models=3
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  ncwa -O -a time $f c_$m.nc
  ncrename -v tas,tas_$m c_$m.nc
  ncks -A -v tas_$m c_$m.nc all_models.nc
  rm c_$m.nc
done
ncdump -h all_models.nc | grep -c 'float tas_' > nvars.txt
