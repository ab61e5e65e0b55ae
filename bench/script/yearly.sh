#!/bin/bash
# Year-by-year anomalies over every model in the current directory (sresalb_<model>.nc), written
# as a plain serial script: about 54 commands a model (1,029 for 19 models). Per model: the
# monthly climatology; per year: extract the year, its mean field, its anomaly against the
# climatology, the anomaly's global mean, tagged with the year in place; then the global-mean
# time series and its trend-free anomalies. Intermediates are removed as a scientist would.
years=${1:-10}
MODELS=$(ls sresalb_*.nc | sed 's/^sresalb_//; s/\.nc$//')
for mdl in $MODELS; do
  ncra -O sresalb_$mdl.nc clim_$mdl.nc
  for ((y = 0; y < years; y++)); do
    first=$((y * 12)); last=$((first + 11))
    ncks -O -d time,$first,$last sresalb_$mdl.nc yr_${mdl}_$y.nc
    ncra -O yr_${mdl}_$y.nc ym_${mdl}_$y.nc
    ncbo -O --op_typ=sub ym_${mdl}_$y.nc clim_$mdl.nc ya_${mdl}_$y.nc
    ncwa -O -a lat,lon ya_${mdl}_$y.nc gm_${mdl}_$(printf %02d $y).nc
    ncatted -O -a year,global,o,i,$y gm_${mdl}_$(printf %02d $y).nc
  done
  ncrcat -O gm_${mdl}_*.nc gmts_$mdl.nc
  rm yr_${mdl}_*.nc ym_${mdl}_*.nc gm_${mdl}_*.nc
done
nces -O gmts_*.nc ens_gmts.nc
for mdl in $MODELS; do
  ncbo -O --op_typ=sub gmts_$mdl.nc ens_gmts.nc spread_$mdl.nc
done
ncecat -O -u model spread_*.nc spreads.nc
rm spread_*.nc ya_*_*.nc
