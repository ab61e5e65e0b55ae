#!/bin/bash
# An ncap2 script written by a here-document and applied with -S to each model.
# data: models=2
cat > derive.nco <<'NCO'
tas_c = tas - 273.15f;
tas_c@units = "degC";
tas_max = tas.max($time);
NCO
for f in sresalb_*.nc; do
  ncap2 -O -S derive.nco $f derived_${f#sresalb_}
done
ncks -O -v tas_max derived_ccma_cgcm3_1.nc max_a.nc
ncks -O -v tas_c -d time,0 derived_ncar_ccsm3_0.nc first_b.nc
