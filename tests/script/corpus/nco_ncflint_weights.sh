#!/bin/bash
# ncflint weighted combinations of two models with weights from variables.
# data: models=2
a=sresalb_ccma_cgcm3_1.nc; b=sresalb_ncar_ccsm3_0.nc
for w in 0.25 0.5 0.75; do
  ncflint -O -w $w,$(awk -v w=$w 'BEGIN{print 1-w}') $a $b mix_$w.nc
done
ncflint -O -w 1.0,-1.0 $a $b difference.nc
ncwa -O -a time,lat,lon difference.nc diff_mean.nc
ls mix_*.nc > mixes.txt
