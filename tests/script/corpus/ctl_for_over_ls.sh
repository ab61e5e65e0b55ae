#!/bin/bash
# for over $(ls ...) of files the script made earlier, and over a glob in a subdirectory.
# data: models=2
mkdir -p out
for f in sresalb_*.nc; do
  ncwa -O -a time $f out/clim_${f#sresalb_}
done
for f in $(ls out/); do
  ncks -O -v tas out/$f out/tas_$f
done
ls out | sort
