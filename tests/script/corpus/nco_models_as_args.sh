#!/bin/bash
# Models given as script arguments, iterated with "$@" and counted with $#.
# args: ncar_ccsm3_0 ccma_cgcm3_1
# data: models=3
echo "processing $# models: $*"
for m in "$@"; do
  ncwa -O -a time sresalb_$m.nc clim_$m.nc
done
nces -O $(for m in "$@"; do echo clim_$m.nc; done) clim_subset.nc
first=$1
ncdiff -O clim_$first.nc clim_subset.nc dev_$first.nc
