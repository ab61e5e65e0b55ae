#!/bin/bash
# Run a shoal program over every node of a Slurm job, from node-local copies of its
# environment: start-up then costs the same on 4 nodes as on 4,000, and the shared file
# system sees one reader per bundle, not one per process (docs/bundle.md, docs/cluster.md).
#
# Once, on the login node (tiers that did not change are reused, so this is quick to redo):
#   shoal bundle --out "$HOME/.shoal/bundles" --app "$PWD" > bundles.txt
#   sbatch examples/slurm_bundle_job.sh
#
# What the three lines do:
#   1. `shoal bcast` sends the bundles to /dev/shm on every node of the allocation (Slurm's
#      sbcast inside an allocation), one receiver per node, checksums verified, installed
#      atomically, readable only by you.
#   2. `shoal env` reroutes Python there (PYTHONHOME, PATH, LD_LIBRARY_PATH; PYTHONPATH and
#      the user site purged) and, with --trap, removes the copies when the script exits.
#   3. `python -m shoal` runs the program here (tier 3 is at $SHOAL_APP) with its head as
#      a child process (in no job step) and ONE agent per node, started as one `srun
#      --overlap --ntasks-per-node=1` step with the same rerouted interpreter; each agent
#      offers the CPUs the job has on its node. The program starts once all have joined.
#
# An MPI application instead of a shoal program: replace the last line with
#   srun python "$SHOAL_APP/main.py"
# (and ask for the tasks: #SBATCH --ntasks-per-node=32 instead of --exclusive).
#
# To run the pieces by hand, keep the head out of any job step (or give every step
# --overlap: a step holds its CPUs, and the next one waits for them silently), and start
# one agent per node, not one per task:
#   shoal head --connection-file run.json --bundle "$ROOT" &
#   while [ ! -e run.json ]; do sleep 0.1; done
#   srun --overlap -N "$SLURM_NNODES" -n "$SLURM_NNODES" --ntasks-per-node=1 --cpu-bind=none \
#        shoal agent --connect run.json --bundle "$ROOT" &
#   python -m shoal --connect run.json "$SHOAL_APP/main.py"
# Later bundles (a changed tier 3, say) can go through the running agents:
#   shoal bcast NEW.tar.zst --to "$ROOT" --connect run.json
#SBATCH --nodes=4
#SBATCH --exclusive
#SBATCH --time=00:30:00
set -euo pipefail

ROOT="/dev/shm/$(id -un)/shoal"
shoal bcast $(cat bundles.txt) --to "$ROOT"
eval "$(shoal env --root "$ROOT" --trap)"
python -m shoal "$SHOAL_APP/main.py"
