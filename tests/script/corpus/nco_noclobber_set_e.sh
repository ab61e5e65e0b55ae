#!/bin/bash
# Under set -e the no-clobber failure stops the script with NCO's exit status.
# data: models=1
set -e
ncwa -a lat,lon sresalb_ccma_cgcm3_1.nc mean.nc
echo first > progress.txt
ncwa -a time sresalb_ccma_cgcm3_1.nc mean.nc
echo second >> progress.txt
ncks -v tas mean.nc never.nc
