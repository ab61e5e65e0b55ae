#!/bin/bash
# One file reached by different spellings: ./x.nc, x.nc, $PWD/x.nc, sub/../x.nc, sub//y.nc.
# data: models=1
mkdir -p sub
ncwa -O -a lat,lon sresalb_ccma_cgcm3_1.nc ./gm.nc
ncks -O -v tas gm.nc sub//tas.nc
ncra -O $PWD/sub/tas.nc sub/../mean.nc
ncatted -a note,global,c,c,"edited" ./sub/tas.nc
ncks -O sub/./tas.nc copy.nc
rm ./gm.nc
ls sub
