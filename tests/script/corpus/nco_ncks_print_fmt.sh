#!/bin/bash
# ncks -s FORMAT printing coordinate values (-s takes a value), to stdout and files.
# data: models=1
ncks -H -C -s '%g\n' -v lat sresalb_ccma_cgcm3_1.nc > lats.txt
ncks -H -C -s '%.1f ' -v lon sresalb_ccma_cgcm3_1.nc
echo
ncwa -O -a lat,lon sresalb_ccma_cgcm3_1.nc gm.nc
ncks -H -C -s '%.3f\n' -v tas -d time,0,3 gm.nc | tee series.txt
wc -l < lats.txt
