#!/bin/bash
# Ensemble concatenation along a new model dimension, then a mean over it.
# data: models=3
ncecat -O -u model sresalb_*.nc stack.nc
ncwa -O -a model stack.nc ensmean.nc
nces -O sresalb_*.nc ensmean_nces.nc
ncdiff -O ensmean.nc ensmean_nces.nc check.nc
ncks -O -v tas -d time,0 check.nc check0.nc
