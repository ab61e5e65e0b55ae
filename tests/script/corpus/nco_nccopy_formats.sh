#!/bin/bash
# nccopy between netCDF formats and ncks -3/-4 conversions, compared with ncdiff.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
nccopy -k nc4 $in as_nc4.nc
nccopy -k classic as_nc4.nc back_classic.nc
ncks -O -4 $in ncks4.nc
ncks -O -3 ncks4.nc ncks3.nc
ncdiff -O back_classic.nc ncks3.nc zero.nc
ncwa -O -y max -a time,lat,lon zero.nc zero_max.nc
