#!/bin/bash
# Logging to a file and the terminal with tee, stderr of a failing step captured with 2>&1.
# data: models=1
echo "start" | tee run.log
ncks -O -v nosuch sresalb_ccma_cgcm3_1.nc x.nc 2>&1 | head -c 0 >> run.log
ncks -O -v tas sresalb_ccma_cgcm3_1.nc tas.nc 2>&1 | tee -a run.log
echo "end" | tee -a run.log
