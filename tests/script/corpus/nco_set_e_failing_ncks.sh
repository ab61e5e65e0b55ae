#!/bin/bash
# set -e: a failing ncks (no such variable) stops the script; the work copy is kept.
# data: models=1
set -e
cp sresalb_ccma_cgcm3_1.nc w.nc
ncwa -O -a lat,lon w.nc w_mean.nc
ncks -O -v nosuch w.nc out.nc
rm w.nc
echo unreachable > after.txt
