#!/bin/bash
# shopt -s nullglob: a glob with no match gives no words, so the loop body never runs.
echo a > a.dat
for f in *.missing; do echo "unexpanded: $f"; done
shopt -s nullglob
for f in *.missing; do echo "never: $f"; done
for f in *.dat *.nothing; do echo "found $f"; done
shopt -u nullglob
echo *.nothing
