#!/bin/bash
# Output names built as $var.$stat.nc and ens_$a$b.nc: several expansions joined by dots.
# data: models=2
var=tas
for stat in avg max min; do
  ncwa -O -y $stat -a time sresalb_ncar_ccsm3_0.nc $var.$stat.nc
done
a=ncar; b=_ccsm3
ncks -O -v tas sresalb_ncar_ccsm3_0.nc ens_$a$b.nc
dir=derived
mkdir -p ${dir}
ncbo -O --op_typ=sub $var.max.nc $var.min.nc ${dir}/$var.range.nc
ls *.nc ${dir}/ > made.txt
