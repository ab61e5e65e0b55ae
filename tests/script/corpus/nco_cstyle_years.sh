#!/bin/bash
# C-style for loop over year indices: annual means per year written with printf'd names.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
for ((y = 0; y < 2; y++)); do
  t0=$((y * 12)); t1=$((t0 + 11))
  name=$(printf 'annual_%04d.nc' $((2000 + y)))
  ncra -O -d time,$t0,$t1 $in $name
done
ncrcat -O annual_*.nc annual_all.nc
rm annual_2000.nc annual_2001.nc
ncks -H -C -v time annual_all.nc > times.txt
