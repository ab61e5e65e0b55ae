#!/bin/bash
# NCO no-clobber: writing an existing output without -O fails, and the script goes on.
# data: models=1
ncwa -a lat,lon sresalb_ccma_cgcm3_1.nc tmp.nc
ncks -v tas tmp.nc out1.nc
ncwa -a lat sresalb_ccma_cgcm3_1.nc tmp.nc
ncks -O -v tas tmp.nc out2.nc
echo "exit after second ncwa: kept going" > log.txt
