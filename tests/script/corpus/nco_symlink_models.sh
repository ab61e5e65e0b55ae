#!/bin/bash
# Short-name symlinks to each model file made in a loop, then processed through the links.
# data: models=3
mkdir -p links
i=0
for f in sresalb_*.nc; do
  i=$((i + 1))
  ln -s ../$f links/m$i.nc
done
for l in links/m*.nc; do
  ncwa -O -a lat,lon $l gm_$(basename $l)
done
nces -O gm_m*.nc gm_ens.nc
ls links
