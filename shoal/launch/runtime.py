"""Which runtime an ``Executor()`` without ``connect=`` starts: the embedded local default
(:mod:`shoal.launch.local`) or, inside a batch job, the whole allocation
(:mod:`shoal.launch.cluster`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from shoal.launch.local import LocalCluster

# shoal.launch.allocation.BATCH_VARS, here so that a process outside any batch job does
# not import the allocation readers (cold start)
_BATCH_VARS = ("SLURM_JOB_ID", "PBS_NODEFILE", "PE_HOSTFILE", "LSB_JOBID", "FLUX_JOB_ID",
               "FLUX_URI")

if TYPE_CHECKING:
    from shoal.launch.allocation import Allocation
    from shoal.launch.cluster import JoinProbe
    from shoal.launch.launchers import Launcher
    from shoal.launch.workenv import WorkerEnv

    JoinProbeFactory = Callable[[str, float], JoinProbe]


def start_runtime(*, workers: int | None = None, slots: int | None = None, prefetch: int = 1,
                  heartbeat_timeout: float | None = None, crash_limit: int | None = None,
                  journal: str | None = None, allocation: Allocation | bool | None = None,
                  launcher: Launcher | str | None = None, interface: str | None = None,
                  env: Mapping[str, str] | None = None, gpus: int | None = None,
                  memory: int | None = None, trace: str | None = None,
                  probe: JoinProbeFactory | None = None,
                  worker_env: WorkerEnv | None = None) -> Any:
    """The runtime an ``Executor()`` without ``connect=`` starts: a
    ``shoal.launch.cluster.AllocationCluster`` over ``allocation`` (None: the one
    discovered, when this process owns it: not inside a Slurm job step, nor a task of
    an agent started by a launcher, ``SHOAL_NODE``), else the embedded
    :class:`~shoal.launch.local.LocalCluster`. ``allocation=False`` forces the local
    default, which imports nothing of the cluster path. ``gpus`` and ``memory`` are the
    local default's agent's; in an allocation each node's agent finds the job's itself.
    ``probe``: how the allocation's start-up sees its agents join (a client of the head:
    the caller's, so that the launch layer needs nothing of the client's). ``worker_env``:
    the agents' prolog, import path and directory (shoal.launch.workenv)."""
    env = os.environ if env is None else env
    owner = not env.get("SLURM_STEP_ID") and not env.get("SHOAL_NODE")  # not a task's
    if allocation is None and (launcher is not None or interface is not None or owner) \
            and any(env.get(v) for v in _BATCH_VARS):
        from shoal.launch.allocation import discover

        allocation = discover(env)
    if allocation is not None and allocation is not False and allocation is not True:
        from shoal.launch.cluster import AllocationCluster

        if probe is None:
            raise ValueError("an allocation's runtime needs probe= (a client that lists its agents)")
        if gpus is not None or memory is not None:
            raise ValueError(f"gpus= and memory= describe the local default's agent: in this "
                             f"{allocation.kind} allocation each node's agent finds the job's GPUs "
                             "and memory itself (or give allocation=False)")
        return AllocationCluster(allocation, launcher, interface=interface, workers=workers,
                                 slots=slots, prefetch=prefetch,
                                 heartbeat_timeout=heartbeat_timeout, crash_limit=crash_limit,
                                 journal=journal, trace=trace, probe=probe,
                                 worker_env=worker_env)
    if launcher is not None or interface is not None:
        from shoal.launch.cluster import ClusterError

        raise ClusterError("launcher= and interface= need an allocation: none was discovered "
                           "(run inside a batch job, or give --hosts/--hostfile)")
    return LocalCluster(workers=workers, slots=slots, prefetch=prefetch,
                        heartbeat_timeout=heartbeat_timeout, crash_limit=crash_limit,
                        journal=journal, gpus=gpus, memory=memory, trace=trace,
                        worker_env=worker_env)
