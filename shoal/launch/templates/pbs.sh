#!/bin/bash
# shoal alloc: pilot job for PBS (PBS Pro / OpenPBS; for Torque use `--template` with
# `#PBS -l nodes=N:ppn=C`). `shoal alloc` fills in the placeholders in double braces;
# `shoal alloc --print-script` shows the result, `--template FILE` replaces this file
# (keep the agent placeholder: it is the command that starts this job's agents).
#PBS -N {{job_name}}
#PBS -l select={{nodes}}{{select}}
#PBS -l place=scatter
#PBS -l walltime={{walltime}}
#PBS -j oe
#PBS -o {{output}}
#PBS -V
{{options}}
{{directives}}

# One agent per node (pbsdsh -u: once on each distinct node) joins the head named in the
# connection file; it leaves after {{idle_timeout}} s without work and drains before the
# walltime (--walltime: PBS tells a job no end time); the job ends when all have left.
# pbsdsh gives its tasks a bare environment: PATH, PYTHONPATH and the job id are passed on.
cd "${PBS_O_WORKDIR:-.}"
pbsdsh -u -- /usr/bin/env PATH="$PATH" PYTHONPATH="${PYTHONPATH:-}" SHOAL_JOB="$PBS_JOBID" \
    /bin/bash -c 'exec "$@" --name "alloc-$SHOAL_JOB-$(hostname -s)"' agent \
    {{agent}}
