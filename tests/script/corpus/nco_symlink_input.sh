#!/bin/bash
# Inputs reached through symbolic links made by the script (ln -s), then processed.
# data: models=2
ln -s sresalb_ccma_cgcm3_1.nc current.nc
ln -s sresalb_ncar_ccsm3_0.nc previous.nc
ncdiff -O current.nc previous.nc change.nc
mkdir links
ln -s ../current.nc links/cur.nc
ncwa -O -a time links/cur.nc cur_clim.nc
