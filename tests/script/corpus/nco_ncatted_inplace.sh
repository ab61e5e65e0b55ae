#!/bin/bash
# In-place attribute edits (ncatted without output file) chained on one file, then a copy.
# data: models=1
cp sresalb_ccma_cgcm3_1.nc work.nc
ncatted -a units,tas,o,c,kelvin work.nc
ncatted -a long_name,tas,c,c,"near-surface air temperature" work.nc
ncatted -a source,global,d,, work.nc
ncatted -O -a institution,global,c,c,"CCCma" work.nc
ncks -O -d time,0,5 work.nc head.nc
ncatted -a comment,global,a,c,"first six months" head.nc
rm work.nc
