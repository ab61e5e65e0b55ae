#!/bin/bash
# Area-weighted global mean: weights made with ncap2, used with ncwa -w, compared with unweighted.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
ncap2 -O -s 'gw=cos(lat*3.14159265/180.0)' $in with_w.nc
ncwa -O -w gw -a lat,lon with_w.nc weighted.nc
ncwa -O -a lat,lon with_w.nc unweighted.nc
ncbo -O --op_typ=sub weighted.nc unweighted.nc wdiff.nc
ncks -O -v tas wdiff.nc wdiff_tas.nc
