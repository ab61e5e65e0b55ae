#!/bin/bash
# Zonal and meridional means per model, their ensemble, and a text table of zonal values.
# data: models=3
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  ncwa -O -a lon,time $f zonal_$m.nc
  ncwa -O -a lat,time $f merid_$m.nc
done
nces -O zonal_*.nc zonal_ens.nc
nces -O merid_*.nc merid_ens.nc
ncks -H -C -s '%.2f\n' -v tas zonal_ens.nc > zonal_table.txt
wc -l < zonal_table.txt
