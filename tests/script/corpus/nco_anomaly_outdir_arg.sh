#!/bin/bash
# Ensemble anomalies into an output directory given as $1, with in-place edits and cleanup.
# args: outdir
# data: models=3
set -e
out=${1:-results}
mkdir -p "$out"
n=0
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  ncwa -O -a lat,lon "$f" tmp.nc
  ncks -O -v tas tmp.nc "ts_$m.nc"
  rm tmp.nc
  ncatted -O -a long_name,tas,o,c,"global mean of $m" "ts_$m.nc"
  n=$((n + 1))
done
nces ts_*.nc "$out/ens.nc"
for f in ts_*.nc; do
  ncbo --op_typ=sub "$f" "$out/ens.nc" "$out/anom_${f#ts_}"
done
rm ts_*.nc
echo "$n models" > "$out/count.txt"
