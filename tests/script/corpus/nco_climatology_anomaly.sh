#!/bin/bash
# Monthly climatology and anomalies by broadcasting ncbo subtraction over each year.
# data: models=2
set -e
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  ncra -O --mro -d time,,,12,12 $f ann_$m.nc
  ncwa -O -a time $f clim_$m.nc
  ncbo -O --op_typ=sbt $f clim_$m.nc anom_$m.nc
  ncwa -O -a lat,lon anom_$m.nc anom_gm_$m.nc
  rm clim_$m.nc
done
ncecat -O -u model anom_gm_*.nc anom_gm_all.nc
printf '%s\n' anom_gm_*.nc > members.txt
