#!/bin/bash
# ncbo with each operation spelling (--op_typ, -y) and the ncdiff alias.
# data: models=2
a=sresalb_ccma_cgcm3_1.nc
b=sresalb_ncar_ccsm3_0.nc
ncbo -O --op_typ=add $a $b sum.nc
ncbo -O -y sbt $a $b sub.nc
ncdiff -O $a $b diff.nc
ncbo -O --op_typ=+ $a $b add.nc
ncbo -O --op_typ=mlt $a $b mul.nc
ncbo -O -y dvd $a $b div.nc
ncbo -O --op_typ=sub sum.nc add.nc zero.nc
ncwa -O -y max -a time,lat,lon zero.nc zmax.nc
