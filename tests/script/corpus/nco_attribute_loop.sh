#!/bin/bash
# Attributes stamped on every output in a loop (ncatted in place), values from variables.
# data: models=3
project="CMIP3 SRES A1B"; i=0
for f in sresalb_*.nc; do
  i=$((i + 1))
  out=stamped_$i.nc
  ncks -O $f $out
  ncatted -a project,global,c,c,"$project" $out
  ncatted -a member,global,c,l,$i $out
  ncatted -a units,tas,m,c,degK $out
done
ncecat -O -u member stamped_*.nc members.nc
ncks -M members.nc | grep -c project > n_projects.txt || true
