#!/bin/bash
# Split the record dimension into years with ncks -d time, rejoin with ncrcat, compare.
# data: models=1
f=sresalb_ccma_cgcm3_1.nc
for y in 0 1; do
  first=$((y * 12)); last=$((first + 11))
  ncks -O -d time,$first,$last $f year_$y.nc
done
ncrcat -O year_0.nc year_1.nc rejoined.nc
ncbo -O --op_typ=- $f rejoined.nc zero.nc
ncwa -O -y max -a time,lat,lon zero.nc maxdiff.nc
ncks -H -C -v tas maxdiff.nc > maxdiff.txt
rm year_*.nc
