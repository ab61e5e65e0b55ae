#!/bin/bash
# Metadata listings with ncks -m and ncdump -h, filtered into per-model text files.
# data: models=2
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  ncks -m $f | grep -E 'tas|time' | sed 's/^ *//' | sort > meta_$m.txt
  ncdump -h $f | grep -c ':units' > units_$m.txt
done
cat units_*.txt | paste -sd+ | awk '{print "total units lines:", $0}'
