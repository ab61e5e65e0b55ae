#!/bin/bash
# Directory and file names with spaces, always quoted, through NCO and cp.
# data: models=2
dir="model output"
mkdir -p "$dir"
for f in sresalb_*.nc; do
  m=${f#sresalb_}
  ncwa -O -a lat,lon "$f" "$dir/global mean ${m}"
done
nces -O "$dir"/global\ mean\ *.nc "$dir/ensemble mean.nc"
cp "$dir/ensemble mean.nc" "final result.nc"
ls "$dir" > "dir listing.txt"
