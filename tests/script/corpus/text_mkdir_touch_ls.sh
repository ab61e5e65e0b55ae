#!/bin/bash
# Directory tree setup with mkdir -p and touch, globbing the made files, ls listings.
for y in 2001 2002 2003; do
  mkdir -p archive/$y/{raw,proc}
  touch archive/$y/raw/obs_$y.txt
  echo "$y" > archive/$y/proc/year.txt
done
ls archive > years.txt
ls archive/*/raw > raw_listing.txt
for f in archive/*/proc/year.txt; do cat "$f"; done
find archive -name '*.txt' | sort > found.txt
