#!/bin/bash
# shoal alloc: pilot job for Slurm. `shoal alloc` fills in the placeholders in double braces;
# `shoal alloc --print-script` shows the result, `--template FILE` replaces this file
# (keep the agent placeholder: it is the command that starts this job's agents).
#SBATCH --job-name={{job_name}}
#SBATCH --nodes={{nodes}}
#SBATCH --ntasks-per-node=1
#SBATCH --time={{walltime}}
#SBATCH --output={{output}}
{{options}}
{{directives}}

# One agent per node joins the head named in the connection file; it leaves after
# {{idle_timeout}} s without work and drains before the job's walltime (SLURM_JOB_END_TIME),
# and the job ends when all its agents have left. The agent's name, alloc-JOBID-NODE,
# tells `shoal alloc` which job an agent came from.
srun --overlap --nodes={{nodes}} --ntasks={{nodes}} --ntasks-per-node=1 \
    /bin/bash -c 'exec "$@" --name "alloc-$SLURM_JOB_ID-$SLURMD_NODENAME"' agent \
    {{agent}}
