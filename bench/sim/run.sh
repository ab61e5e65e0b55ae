#!/bin/sh
# Issue 14's simulator figures (docs/benchmarks.md, "Issue 14: simulation"): every run of
# the table, one JSON line each, appended to the file given (default bench/sim/results.jsonl).
# Takes about 40 minutes on a shared 2-core machine (the million-task runs and rp-2048).
set -e
cd "$(dirname "$0")/../.."
OUT=${1:-bench/sim/results.jsonl}
PY=${PYTHON:-python3}
W=bench/sim/workloads
sim() { echo "shoal sim $*" >&2; $PY -m shoal sim "$@" --json >> "$OUT"; }
sim $W/tiny.toml
for policy in fifo big-first; do
  for p in 1 0; do
    sim $W/rp-256.toml --policy $policy --prefetch $p
    for e in 0 0.2; do sim $W/rp-256.toml --policy $policy --prefetch $p --estimate $e --cost zero; done
  done
done
sim $W/million.toml
sim $W/million.toml --estimate 0
sim $W/million.toml --estimate 0 --cost zero
sim $W/million.toml --scale-duration 0.5
sim $W/weak-scaling.toml
sim $W/million.toml --scale-duration 0.25
sim $W/million.toml --scale-duration 0.125
sim $W/million.toml --scale-duration 0.0625
sim $W/million.toml --results batch
sim $W/rp-2048.toml --policy big-first --prefetch 0   # ~5-15 minutes each
sim $W/rp-2048.toml --policy big-first --prefetch 0 --estimate 0 --cost zero
# planning with estimates (docs/benchmarks.md, "Planning with estimates"): policy plan
for e in 0 0.2; do
  for cost in zero measured; do sim $W/rp-256.toml --policy plan --prefetch 0 --estimate $e --cost $cost; done
done
sim $W/rp-2048.toml --policy plan --prefetch 0 --estimate 0 --cost measured
sim $W/rp-2048.toml --policy plan --prefetch 0 --estimate 0.2 --cost zero   # ~6 minutes
