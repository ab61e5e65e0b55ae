#!/bin/bash
# Work done after cd into a subdirectory, relative paths back with ../, and cd back.
# data: models=2
mkdir -p proc
cd proc
for f in ../sresalb_*.nc; do
  b=$(basename $f)
  ncwa -O -a time $f clim_$b
done
nces -O clim_*.nc clim_ens.nc
cd ..
ncks -O -v tas proc/clim_ens.nc final.nc
ls proc
