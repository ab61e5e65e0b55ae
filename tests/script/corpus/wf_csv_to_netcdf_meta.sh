#!/bin/bash
# Station metadata from CSV stamped as global attributes on copies of a model file.
# data: models=1 text
tail -n +2 stations.csv | sort -t, -k1,1n -u > st.csv
while IFS=, read -r id name lat lon elev; do
  out=station_${id}_${name,,}.nc
  ncks -O -v tas -d lat,$lat -d lon,$lon sresalb_ccma_cgcm3_1.nc $out
  ncatted -a station,global,c,c,"$name" -a elevation,global,c,d,$elev $out
done < st.csv
ls station_*.nc > stations_made.txt
