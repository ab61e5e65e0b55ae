#!/bin/bash
# ncks -A into a file that does not exist yet, then appending more variables to it.
# data: models=2
ncks -A -v lat sresalb_ccma_cgcm3_1.nc coords.nc
ncks -A -v lon sresalb_ccma_cgcm3_1.nc coords.nc
ncwa -O -a time sresalb_ncar_ccsm3_0.nc clim.nc
ncrename -v tas,tas_clim clim.nc
ncks -A -v tas_clim clim.nc coords.nc
rm clim.nc
