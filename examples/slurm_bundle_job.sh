#!/bin/bash
# Start a Python MPI job from node-local copies of its environment: start-up then costs the
# same on 4 nodes as on 4,000, and the shared file system sees one reader per bundle, not
# one per rank.
#
# Once, on the login node (tiers that did not change are reused, so this is quick to redo):
#   shoal bundle --out "$HOME/.shoal/bundles" --app "$PWD" > bundles.txt
#   sbatch examples/slurm_bundle_job.sh
#
# What the three lines do:
#   1. `shoal bcast` sends the bundles to /dev/shm on every node of the allocation (Slurm's
#      sbcast inside an allocation; MPI when run under mpirun), one receiver per node,
#      checksums verified, installed atomically, readable only by you.
#   2. `shoal env` reroutes Python there (PYTHONHOME, PATH, LD_LIBRARY_PATH; PYTHONPATH and
#      the user site purged) and, with --trap, removes the copies when the script exits.
#   3. srun starts the application from the local copy (tier 3 is at $SHOAL_APP).
#
# The same for a shoal run instead of srun (every agent and worker imports from /dev/shm):
#   shoal head --connection-file run.json --bundle "/dev/shm/$USER/shoal" &
#   srun --ntasks-per-node=1 shoal agent --connect run.json --bundle "/dev/shm/$USER/shoal" &
#   python "$SHOAL_APP/main.py"          # uses Executor(connect="run.json")
# Later bundles (a changed tier 3, say) can go through the running agents:
#   shoal bcast NEW.tar.zst --to "/dev/shm/$USER/shoal" --connect run.json
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=32
#SBATCH --time=00:30:00
set -euo pipefail

shoal bcast $(cat bundles.txt) --to "/dev/shm/$USER/shoal"
eval "$(shoal env --root "/dev/shm/$USER/shoal" --trap)"
srun python "$SHOAL_APP/main.py"
