#!/bin/bash
# ncks -v lists, -x exclusion, -C coordinates, and -d on several dimensions.
# data: models=1
f=sresalb_ccma_cgcm3_1.nc
ncks -O -v lat,lon $f coords.nc
ncks -O -x -v tas $f no_tas.nc
ncks -O -C -v tas $f tas_noco.nc
ncks -O -d time,1,3 -d lat,1,2 -d lon,2 $f cut.nc
ncks -O -v tas -d time,-1 $f last.nc
