#!/bin/bash
# A shell function with local variables wrapping ncks/ncwa for named regions.
# data: models=2
region() {
  local name=$1 lat0=$2 lat1=$3
  local in=$4
  ncks -O -d lat,$lat0,$lat1 "$in" "${name}_${in}"
  ncwa -O -a lat,lon "${name}_${in}" "${name}_mean_${in}"
  rm "${name}_${in}"
  return 0
}
for f in sresalb_*.nc; do
  region south -90.0 0.0 "$f"
  region north 0.0 90.0 "$f"
done
nces -O north_mean_*.nc north_ens.nc
nces -O south_mean_*.nc south_ens.nc
ncdiff -O north_ens.nc south_ens.nc contrast.nc
