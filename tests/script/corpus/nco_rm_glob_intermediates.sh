#!/bin/bash
# Intermediates removed by glob in the middle of the script, then the names reused.
# data: models=2
for f in sresalb_*.nc; do
  ncks -O -d time,0,11 $f y1_${f#sresalb_}
  ncks -O -d time,12,23 $f y2_${f#sresalb_}
done
nces -O y1_*.nc y1_ens.nc
nces -O y2_*.nc y2_ens.nc
rm y1_*.nc y2_sresalb* 2>/dev/null; rm -f y2_ccma*.nc y2_ncar*.nc
ncdiff -O y2_ens.nc y1_ens.nc change.nc
for f in sresalb_*.nc; do ncks -O -d time,0 $f y1_${f#sresalb_}; done
echo y1_* y2_*
