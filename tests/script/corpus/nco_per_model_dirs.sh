#!/bin/bash
# One output directory per model (out/$m/...), processed in a function, listed at the end.
# data: models=3
process() {
  local m=$1 d=out/$1
  mkdir -p $d
  ncwa -O -a lat,lon sresalb_$m.nc $d/gm.nc
  ncra -O --mro -d time,,,12,12 $d/gm.nc $d/ann.nc
  echo $m > $d/name.txt
}
for f in sresalb_*.nc; do
  m=${f#sresalb_}
  process ${m%.nc}
done
nces -O out/*/ann.nc ann_ens.nc
cat out/*/name.txt
