#!/bin/bash
# Parameter expansion operators on file names: ${a:-x} ${a%.nc} ${a#*/} ${#a} ${a/x/y} and friends.
# data: models=2
path=input/sresalb_ccma_cgcm3_1.nc
echo "${path#*/}" "${path##*/}" "${path%.nc}" "${path%%_*}" "${#path}"
echo "${path/sresalb/tas}" "${path//_/-}" "${path:6:7}" "${unset:-default}" "${path:+set}"
name=${path##*/}; base=${name%.nc}
ncwa -O -a lat,lon $name ${base/sresalb/gm}.nc
model=${base#sresalb_}
ncks -O -v tas ${base}.nc ${model^^}.nc
: ${outdir:=results}
mkdir -p $outdir
cp ${base/sresalb/gm}.nc $outdir/${model%%_*}.nc
echo "$outdir ${model,,} ${#model}" > info.txt
