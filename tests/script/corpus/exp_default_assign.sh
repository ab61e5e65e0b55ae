#!/bin/bash
# Defaults: ${v:-x} ${v-x} ${v:=x} ${v:+x} ${v:?msg} with unset, empty and set variables.
empty=""
echo "[${unset:-d1}] [${unset-d2}] [${empty:-d3}] [${empty-d4}]" > defaults.txt
: ${outdir:=out_default}
: ${empty:=filled}
mkdir -p $outdir
echo "$outdir $empty" > $outdir/vals.txt
set_v=yes
echo "[${set_v:+alt}] [${unset:+alt}] [${empty:+alt}]" >> defaults.txt
echo "${set_v:?must be set}" >> defaults.txt
cat defaults.txt
