#!/bin/bash
# NCO flags that take no value placed right before file names: ncecat -M, ncap2 -v, ncks -M/-m,
# ncra -Y is not used; ncwa -I; ncks -q.
# data: models=2
ncecat -O -M sresalb_ccma_cgcm3_1.nc sresalb_ncar_ccsm3_0.nc stacked.nc
ncap2 -O -v -s 'tas_c=tas-273.15f' sresalb_ccma_cgcm3_1.nc only_new.nc
ncks -M stacked.nc | grep -c 'dimension' > n_dims.txt || true
ncwa -O -I -a lat,lon sresalb_ncar_ccsm3_0.nc gm_noI.nc
ncks -O -q -v lat sresalb_ncar_ccsm3_0.nc quiet.nc
ncks -O -C -x -v time stacked.nc no_time.nc
