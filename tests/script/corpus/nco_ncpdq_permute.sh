#!/bin/bash
# ncpdq dimension reordering and reversal, then a mean over the new leading dimension.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
ncpdq -O -a lat,time,lon $in lat_first.nc
ncpdq -O -a -lat $in lat_reversed.nc
ncwa -O -a lat lat_first.nc no_lat.nc
ncpdq -O -a lon,time no_lat.nc lon_time.nc
ncks -O -v tas -d lon,0 lon_time.nc one_lon.nc
