#!/bin/bash
# Without set -e a failing NCO command is skipped over; its status is seen via ||.
# data: models=1
cp sresalb_ccma_cgcm3_1.nc w.nc
ncks -O -v nosuch w.nc out.nc 2>/dev/null || echo "ncks failed" > failed.txt
ncks -O -v tas w.nc ok.nc && echo "ncks ok" >> failed.txt
rm w.nc
ncks -O -v missing ok.nc bad.nc 2> err.log
echo "last line"
