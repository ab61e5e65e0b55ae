#!/bin/bash
# mkdir -p work/sub then cp into it: the copy must wait for the directory.
# data: models=2
mkdir -p work/sub
cp sresalb_ccma_cgcm3_1.nc work/
cp sresalb_ncar_ccsm3_0.nc work/sub/
ncwa -O -a time work/sresalb_ccma_cgcm3_1.nc work/sub/clim_a.nc
ncwa -O -a time work/sub/sresalb_ncar_ccsm3_0.nc work/sub/clim_b.nc
ncdiff -O work/sub/clim_a.nc work/sub/clim_b.nc work/delta.nc
ls -R work > tree.txt
