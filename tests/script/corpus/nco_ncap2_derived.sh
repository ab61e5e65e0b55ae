#!/bin/bash
# ncap2 derived variables (Celsius, anomaly, flag) then keep them with ncks -v.
# data: models=2
set -e
for f in sresalb_*.nc; do
  base=${f%.nc}
  ncap2 -O -s 'tas_c=tas-273.15f' $f ${base}_c.nc
  ncap2 -O -s 'warm=(tas_c > 10.0f)' ${base}_c.nc ${base}_flag.nc
  ncks -O -v tas_c,warm ${base}_flag.nc ${base}_derived.nc
  rm ${base}_c.nc ${base}_flag.nc
done
ncks -A -v tas_c sresalb_ccma_cgcm3_1_derived.nc combined.nc
echo done > status.txt
