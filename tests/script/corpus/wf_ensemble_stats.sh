#!/bin/bash
# Ensemble statistics with nces -y (mean, max, min, rms) and their spread.
# data: models=4
for op in avg max min rms; do
  nces -O -y $op sresalb_*.nc ens_$op.nc
done
ncbo -O --op_typ=sub ens_max.nc ens_min.nc ens_spread.nc
ncwa -O -a time,lat,lon ens_spread.nc spread_mean.nc
ncks -H -C -s '%.3f\n' -v tas spread_mean.nc
