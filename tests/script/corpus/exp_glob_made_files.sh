#!/bin/bash
# Globs over files the script made earlier, before and after rm, with ? and [..] patterns.
# data: models=2
for f in sresalb_*.nc; do
  ncwa -O -a lat,lon $f gm_${f#sresalb_}
  ncwa -O -a time $f clim_${f#sresalb_}
done
echo gm_*.nc > first.txt
nces -O gm_*.nc gm_ens.nc
rm gm_ccma*.nc
echo gm_*.nc > second.txt
ls clim_?c*.nc > third.txt
echo clim_[cn]*.nc >> third.txt
echo nomatch_*.nc >> third.txt
