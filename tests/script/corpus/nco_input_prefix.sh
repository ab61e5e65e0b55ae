#!/bin/bash
# Input path prefix with -p: inputs named relative to a directory the script filled.
# data: models=2
mkdir -p inputs
mv sresalb_ccma_cgcm3_1.nc inputs/
cp sresalb_ncar_ccsm3_0.nc inputs/
ncwa -O -p inputs -a lat,lon sresalb_ccma_cgcm3_1.nc gm_a.nc
ncra -O -p inputs sresalb_ccma_cgcm3_1.nc sresalb_ncar_ccsm3_0.nc rec_mean.nc
nces -O -p inputs sresalb_ccma_cgcm3_1.nc sresalb_ncar_ccsm3_0.nc ens.nc
ls inputs
