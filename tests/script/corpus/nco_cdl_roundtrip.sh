#!/bin/bash
# ncdump to CDL, edit the CDL with sed, ncgen it back to netCDF, and compress the CDL.
# data: models=1
ncks -O -d time,0,2 sresalb_ccma_cgcm3_1.nc small.nc
ncdump small.nc > small.cdl
sed -i 's/tas:units = "K"/tas:units = "kelvin"/' small.cdl
ncgen -o rebuilt.nc small.cdl
ncdump -h rebuilt.nc | grep -c kelvin > kelvin_count.txt
gzip -n small.cdl
rm small.nc
