#!/bin/bash
# Renaming variables, dimensions and attributes with ncrename, in place and to a new file.
# data: models=1
ncrename -O -v tas,tas_K sresalb_ccma_cgcm3_1.nc renamed.nc
ncrename -d lat,latitude -v lat,latitude renamed.nc
ncrename -a .units,units_orig renamed.nc
ncks -O -v tas_K renamed.nc only.nc
ncrename -O -v tas_K,air only.nc final.nc
rm only.nc
