#!/bin/bash
# Record-dimension changes: --fix_rec_dmn, --mk_rec_dmn, ncecat without -u, ncpdq -a.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
ncks -O --fix_rec_dmn time $in fixed.nc
ncks -O --mk_rec_dmn time fixed.nc lat_rec.nc
ncecat -O $in $in rec2.nc
ncwa -O -a record rec2.nc rec_mean.nc
ncdump -h lat_rec.nc | grep UNLIMITED | sed 's/^[[:space:]]*//' > unlimited.txt
