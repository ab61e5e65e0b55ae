#!/bin/bash
# ${!name} indirection, ${v^^}/${v,,} case, ${v:offset:length}, substring removal on vars.
tas_units=K; pr_units=kg_m2_s
for v in tas pr; do
  ref=${v}_units
  echo "$v ${!ref}"
done > units.txt
s=Hello_World
echo "${s^^} ${s,,} ${s:0:5} ${s: -5} ${s:6}" > case.txt
f=/data/cmip5/tas_Amon_model_hist.nc
IFS=_ read -r var table rest <<< "${f##*/}"
echo "$var $table ${rest%.nc}" > parts.txt
