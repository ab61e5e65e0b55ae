#!/bin/bash
# Pattern removal and replacement in a loop over paths: ## %% / // with globs in patterns.
for p in data/cmip5/tas_Amon_A.nc data/cmip6/pr_day_B.nc.gz obs/psl_mon.nc; do
  file=${p##*/}
  dir=${p%/*}
  top=${p%%/*}
  var=${file%%_*}
  ext=${file#*.}
  noext=${file%%.*}
  echo "$top|$dir|$file|$var|$ext|$noext|${p//\//:}|${file/_/-}"
done > parsed.txt
cut -d'|' -f4 parsed.txt | sort -u > vars.txt
cat parsed.txt
