#!/bin/bash
# Hyperslab arguments built from arithmetic and variables: -d time,$a,$b,$stride and lat,$x.0.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
start=2; count=4; stride=3
end=$((start + (count - 1) * stride))
ncks -O -d time,$start,$end,$stride $in strided.nc
lat0=-45; lat1=45
ncks -O -d lat,$lat0.0,$lat1.0 -d lon,${start}0.0,$((end * 20)).0 $in box.nc
ncks -H -C -v time strided.nc | head -n 4 > times.txt
ncks -H -C -v lon box.nc > lons.txt
