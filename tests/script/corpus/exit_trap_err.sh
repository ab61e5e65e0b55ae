#!/bin/bash
# trap ... ERR with set -e: the handler records the failing step before the script stops.
# data: models=1
set -e
trap 'echo "failed near step $step" > error.txt' ERR
step=1
ncwa -O -a lat,lon sresalb_ccma_cgcm3_1.nc gm.nc
step=2
ncks -O -v nosuch gm.nc sel.nc 2>/dev/null
step=3
echo done > done.txt
