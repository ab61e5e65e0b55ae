#!/bin/bash
# set -u with every variable defaulted (${1:-...}, ${VAR:-...}), so the script succeeds.
# data: models=1
set -u
in=${1:-sresalb_ccma_cgcm3_1.nc}
out=${OUTDIR:-out}
levels=${LEVELS:-}
mkdir -p $out
ncwa -O -a time $in $out/clim.nc
echo "levels=[${levels}] in=$in" > $out/info.txt
