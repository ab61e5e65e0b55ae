#!/bin/bash
# Global means printed to stdout for each model with a label, as a CSV on stdout.
# data: models=3
echo "model,mean"
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  ncwa -O -a time,lat,lon $f gm.nc
  v=$(ncks -H -C -s '%.2f' -v tas gm.nc)
  echo "$m,$v"
done
rm gm.nc
