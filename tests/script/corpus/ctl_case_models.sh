#!/bin/bash
# case on model names with patterns and fall-through, choosing per-model NCO options.
# data: models=4
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  case $m in
    ccma*|gfdl*) dom=north; lat="0.0,90.0" ;;
    ncar_*) dom=south; lat="-90.0,0.0" ;;
    *) dom=all; lat="-90.0,90.0" ;;
  esac
  ncks -O -d lat,$lat $f ${dom}_$m.nc
  echo "$m $dom" >> domains.txt
done
ls north_* south_* all_* > made.txt
