#!/bin/bash
# Commands started in the background with & and collected with wait, a common way to use cores.
# data: models=3
for f in sresalb_*.nc; do
  ncwa -O -a lat,lon $f gm_${f#sresalb_} &
done
wait
nces -O gm_*.nc gm_ens.nc &
ncwa -O -a time sresalb_gfdl_cm2_0.nc clim_gfdl.nc &
wait
ls gm_* clim_*
