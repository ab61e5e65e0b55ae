#!/bin/bash
# Intermediates with the same base name in different directories (tmp.nc in a/ and b/).
# data: models=2
mkdir -p a b
ncwa -O -a lat,lon sresalb_ccma_cgcm3_1.nc a/tmp.nc
ncwa -O -a lat,lon sresalb_ncar_ccsm3_0.nc b/tmp.nc
ncra -O a/tmp.nc a_mean.nc
ncra -O b/tmp.nc b_mean.nc
rm a/tmp.nc b/tmp.nc
ncdiff -O a_mean.nc b_mean.nc diff.nc
ls a b
