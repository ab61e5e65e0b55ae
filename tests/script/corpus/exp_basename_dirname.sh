#!/bin/bash
# basename/dirname in command substitutions, with suffixes, on made and absent paths.
# data: models=2
for f in $PWD/sresalb_*.nc; do
  b=$(basename $f .nc)
  d=$(basename $(dirname $f))
  ncks -O -v lat $f coord_${b#sresalb_}.nc
  echo "$b" >> names.txt
done
echo "$(dirname a/b/c.nc) $(basename a/b/c.nc) $(basename /x/y/) $(dirname file)" > paths.txt
cat names.txt paths.txt
