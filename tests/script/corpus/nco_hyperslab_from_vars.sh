#!/bin/bash
# Latitude band and longitude box from variables: -d lat,$lo.0,$hi.0 and -d lon,$w,$e.
# data: models=2
lo=-30; hi=30
w=0.; e=180.
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  ncks -O -d lat,$lo.0,$hi.0 $f tropics_$m.nc
  ncks -O -d lon,$w,$e -d lat,$lo.0,$hi.0 $f box_$m.nc
  ncwa -O -a lat,lon box_$m.nc boxmean_$m.nc
done
nces -O boxmean_*.nc boxmean_ens.nc
ncks -H -C -v tas -d time,0 boxmean_ens.nc > first_value.txt
