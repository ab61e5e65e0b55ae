#!/bin/bash
# The SWAMP paper's sample: spatial means, year-2000 baseline, anomalies, ensemble mean.
# data: models=2
for mdl in ccma_cgcm3_1 ncar_ccsm3_0; do
  ncwa -a lat,lon sresalb_${mdl}.nc avg_${mdl}.nc
  ncwa -d time,0,11 avg_${mdl}.nc 2000_${mdl}.nc
  ncdiff avg_${mdl}.nc 2000_${mdl}.nc anm_${mdl}.nc
done
ncea avg_*.nc sresalb_avg.nc
ncwa -d time,0,11 sresalb_avg.nc sresalb_avg_2k.nc
ncdiff sresalb_avg.nc sresalb_avg_2k.nc sresalb_anm.nc
