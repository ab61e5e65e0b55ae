#!/bin/bash
# A complete post-processing pipeline: config, per-model steps, ensemble, report, cleanup.
# args: run42
# data: models=3
set -e
run=${1:?run name required}
work=work_$run
out=out/$run
rm -rf $work; mkdir -p $work $out
log() { echo "[$run] $*" >> $out/pipeline.log; }
log "start"
models=""
for f in sresalb_*.nc; do
  m=${f#sresalb_}; m=${m%.nc}
  models="$models $m"
  cp $f $work/in_$m.nc
  ncwa -O -a lat,lon $work/in_$m.nc $work/gm_$m.nc
  ncra -O --mro -d time,,,12,12 $work/gm_$m.nc $work/ann_$m.nc
  ncatted -O -a model,global,o,c,$m $work/ann_$m.nc
  log "model $m done"
done
nces -O $work/ann_*.nc $out/ann_ens.nc
for m in $models; do
  ncbo -O --op_typ=sub $work/ann_$m.nc $out/ann_ens.nc $out/anom_$m.nc
done
ncecat -O -u model $out/anom_*.nc $out/anoms.nc
cat > $out/README <<EOF2
run: $run
models:$models
files: $(ls $out | wc -l)
EOF2
rm -rf $work
log "end"
