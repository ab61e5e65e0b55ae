#!/bin/bash
# Seasonal and monthly climatologies with ncra strides, joined with ncrcat.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
for m in $(seq 0 11); do
  ncra -O -d time,$m,,12 $in clim_m$(printf %02d $m).nc
done
ncrcat -O clim_m*.nc monthly_clim.nc
ncra -O -d time,0,2 $in djf_like.nc
ncra -O --mro -d time,,,3,3 $in seasonal.nc
rm clim_m*.nc
ls
