#!/bin/bash
# NCO failures handled with || and a status file, the script ending with exit 0.
# data: models=2
for f in sresalb_*.nc nonexistent.nc; do
  ncwa -O -a time "$f" "clim_$f" 2>/dev/null || echo "failed: $f" >> failures.txt
done
ls clim_* > made.txt
exit 0
