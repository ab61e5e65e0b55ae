#!/bin/bash
# Values printed by ncks piped through tee into a log and to stdout, per model.
# data: models=2
for f in sresalb_*.nc; do
  ncwa -O -a time,lat,lon $f mean_${f#sresalb_}
  echo "== $f" | tee -a values.log
  ncks -H -C -s '%.3f\n' -v tas mean_${f#sresalb_} | tee -a values.log
done
wc -l < values.log
