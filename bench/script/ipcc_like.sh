#!/bin/bash
# Ensemble workflow over every model in the current directory (sresalb_<model>.nc), written
# as a plain serial script. Per model: A1 spatial mean, A2 annual means of it, A3 annual-mean
# fields; ensemble means E1/E2; per model again: B1/B2 anomalies, B3 bias; F1 gather, F2 mean.
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
# keep the results, drop the per-model intermediates
rm avg_*.nc ann_*.nc fld_*.nc anm_*.nc anmfld_*.nc
