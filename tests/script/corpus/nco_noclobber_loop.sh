#!/bin/bash
# A loop writing the same output without -O: the first write succeeds, later ones are refused by
# NCO's no-clobber (so the file keeps the first model's data).
# data: models=3
for f in sresalb_*.nc; do
  ncwa -a lat,lon $f gm.nc
  echo "$f -> $?" >> status.txt
done 2>/dev/null
ncks -H -C -s '%.2f\n' -v tas -d time,0 gm.nc
