#!/bin/bash
# Arithmetic-driven loop over time chunks with NCO, chunk size from a variable.
# data: models=1
in=sresalb_ccma_cgcm3_1.nc
nt=24; chunk=8; k=0
while [ $((k * chunk)) -lt $nt ]; do
  a=$((k * chunk)); b=$((a + chunk - 1))
  ncra -O -d time,$a,$b $in chunk_$k.nc
  k=$((k + 1))
done
ncrcat -O chunk_0.nc chunk_1.nc chunk_2.nc chunks.nc
echo "$k chunks" > chunks.txt
