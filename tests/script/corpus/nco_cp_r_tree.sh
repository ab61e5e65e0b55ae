#!/bin/bash
# cp -r of a directory of netCDF files, then processing the copies.
# data: models=2
mkdir -p inputs
cp sresalb_*.nc inputs/
cp -r inputs backup
ncwa -O -a time backup/sresalb_ccma_cgcm3_1.nc clim.nc
rm -r inputs
ls backup | sort > backup.txt
