#!/bin/bash
# Rolling 6-month windows over a series: overlapping ncra averages joined into one file.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
ncwa -O -a lat,lon $in series.nc
w=6
for ((s = 0; s + w <= 24; s += 3)); do
  ncra -O -d time,$s,$((s + w - 1)) series.nc win_$(printf %02d $s).nc
done
ncrcat -O win_*.nc rolling.nc
ls win_*.nc | wc -l > n_windows.txt
rm win_*.nc series.nc
