#!/bin/bash
# Per-timestep slices written as $out/ens_t$i.nc (two expansions in one word), then joined.
# data: models=2
out=slices
mkdir -p $out
for i in 0 6 12 18; do
  ncks -O -d time,$i,$((i + 5)) sresalb_ccma_cgcm3_1.nc $out/ens_t$i.nc
done
ncrcat -O $out/ens_t0.nc $out/ens_t6.nc $out/ens_t12.nc $out/ens_t18.nc $out/joined.nc
ncwa -O -a time $out/joined.nc $out/clim.nc
ls $out > listing.txt
