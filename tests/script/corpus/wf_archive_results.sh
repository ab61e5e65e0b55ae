#!/bin/bash
# Archiving: results moved into a dated directory, CDL text gzipped, a manifest written.
# data: models=2
stamp=20240101
mkdir -p results
for f in sresalb_*.nc; do
  ncwa -O -a time $f results/clim_${f#sresalb_}
  ncdump -h results/clim_${f#sresalb_} > results/clim_${f#sresalb_}.cdl
done
gzip -n results/*.cdl
mv results archive_$stamp
ls archive_$stamp | sort > manifest.txt
cp -r archive_$stamp backup_$stamp
rm -r backup_$stamp/*.gz
