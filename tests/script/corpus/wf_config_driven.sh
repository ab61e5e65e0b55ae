#!/bin/bash
# Settings read from a key=value file present at start drive the NCO commands.
# data: models=2 text
while IFS== read -r k v; do
  case $k in
    var) var=$v ;;
    region) region=$v ;;
    scale) scale=$v ;;
  esac
done < params.txt
for f in sresalb_*.nc; do
  ncap2 -O -s "${var}_scaled=$var*$scale" $f ${region}_${f#sresalb_}
done
echo "$var x$scale for $region" > applied.txt
