#!/bin/bash
# set -e with a failing command inside a function: the whole script stops there.
# data: models=1
set -e
process() {
  ncwa -O -a lat,lon "$1" "gm_$1"
  ncks -O -v "$2" "gm_$1" "sel_$1"
  echo "processed $1" >> done.txt
}
process sresalb_ccma_cgcm3_1.nc tas
process sresalb_ccma_cgcm3_1.nc nosuchvar
echo never >> done.txt
