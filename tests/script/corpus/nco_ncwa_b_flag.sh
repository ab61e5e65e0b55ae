#!/bin/bash
# ncwa -b keeps degenerate dimensions (a flag, not an option with a value).
# data: models=2
for f in sresalb_*.nc; do
  ncwa -O -b -a lat,lon $f keep_${f#sresalb_}
  ncwa -O -a lat,lon $f drop_${f#sresalb_}
done
ncdump -h keep_ccma_cgcm3_1.nc | grep -E 'lat|lon' | sed 's/^[[:space:]]*//' > keep_dims.txt
ncdump -h drop_ccma_cgcm3_1.nc | grep -c 'lat = ' > drop_count.txt || true
