#!/bin/bash
# IPCC-like ensemble workflow: model list from ls|sed, annual means, ensemble anomalies, biases.
# data: models=3
MODELS=$(ls sresalb_*.nc | sed 's/^sresalb_//; s/\.nc$//')
for mdl in $MODELS; do
  ncwa -a lat,lon sresalb_${mdl}.nc avg_${mdl}.nc
  ncra --mro -d time,,,12,12 avg_${mdl}.nc ann_${mdl}.nc
  ncra --mro -d time,,,12,12 sresalb_${mdl}.nc fld_${mdl}.nc
done
nces ann_*.nc ens_ann.nc
nces fld_*.nc ens_fld.nc
for mdl in $MODELS; do
  ncdiff ann_${mdl}.nc ens_ann.nc anm_${mdl}.nc
  ncdiff fld_${mdl}.nc ens_fld.nc anmfld_${mdl}.nc
  ncwa -a time anm_${mdl}.nc bias_${mdl}.nc
done
ncecat -u model bias_*.nc biases.nc
nces anmfld_*.nc ens_anmfld.nc
rm avg_*.nc ann_*.nc fld_*.nc anm_*.nc anmfld_*.nc
