#!/bin/bash
# Results written into a staging directory that is then moved into place with mv.
# data: models=2
mkdir staging
for f in sresalb_*.nc; do
  ncwa -O -a lat,lon $f staging/gm_${f#sresalb_}
done
mkdir -p archive
mv staging archive/run1
nces -O archive/run1/gm_*.nc ens.nc
ls archive/run1 > archived.txt
