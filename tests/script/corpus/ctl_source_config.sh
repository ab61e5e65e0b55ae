#!/bin/bash
# A config written by the script itself then sourced; variables from it drive the work.
cat > config.sh <<'CFG'
var=tas
years="2001 2002"
outdir=processed
CFG
. ./config.sh
mkdir -p $outdir
for y in $years; do
  echo "$var $y" > $outdir/${var}_$y.txt
done
source config.sh
echo "$var in $outdir"
