#!/bin/bash
# rm -rf of an output directory then mkdir and writing into it, twice in a row.
# data: models=1
out=results
mkdir -p $out
ncks -O -v lat sresalb_ccma_cgcm3_1.nc $out/old.nc
rm -rf $out; mkdir $out
ncwa -O -a lat,lon sresalb_ccma_cgcm3_1.nc $out/gm.nc
rm -rf $out
mkdir $out
ncwa -O -a time sresalb_ccma_cgcm3_1.nc $out/clim.nc
ls $out
