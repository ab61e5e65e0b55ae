#!/bin/bash
# The same temporary name written and read repeatedly (SSA renaming gives independent chains).
# data: models=3
for f in sresalb_*.nc; do
  ncwa -O -a lat,lon $f tmp.nc
  ncra -O --mro -d time,,,12,12 tmp.nc tmp2.nc
  ncks -O -v tas tmp2.nc ann_${f#sresalb_}
done
rm tmp.nc tmp2.nc
nces -O ann_*.nc ann_ens.nc
ncwa -O -a lat,lon sresalb_gfdl_cm2_0.nc tmp.nc
ncks -O -d time,0 tmp.nc kept_tmp_copy.nc
