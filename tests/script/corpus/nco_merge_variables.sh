#!/bin/bash
# Merging variables from several derived files into one with ncks -A, then renaming.
# data: models=2
f=sresalb_ccma_cgcm3_1.nc
ncwa -O -y max -a time $f tmax.nc
ncwa -O -y min -a time $f tmin.nc
ncrename -v tas,tas_max tmax.nc
ncrename -v tas,tas_min tmin.nc
cp tmax.nc merged.nc
ncks -A -v tas_min tmin.nc merged.nc
ncap2 -O -s 'dtr=tas_max-tas_min' merged.nc merged_dtr.nc
rm tmax.nc tmin.nc
