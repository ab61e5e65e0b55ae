#!/bin/bash
# set -e with an independent later command: bash never runs it after the failure.
# data: models=2
set -e
ncwa -O -a lat,lon sresalb_ccma_cgcm3_1.nc a.nc
ncks -O -v tas -d time,100 a.nc b.nc
ncwa -O -a lat,lon sresalb_ncar_ccsm3_0.nc independent.nc
echo done > done.txt
