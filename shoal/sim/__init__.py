"""Simulation at supercomputer scale: the real scheduler core, fake agents, virtual time.

    from shoal import sim
    wl = sim.load("bench/sim/workloads/rp-256.toml")
    r = sim.simulate(wl, trace="rp.trace")    # SimResult: makespan, utilization, head CPU
    print(sim.format_text(r))

`shoal sim WORKLOAD` does the same from the command line (docs/sim.md). The model is in
:mod:`shoal.sim.engine`, the workload file format in :mod:`shoal.sim.workload`.
"""

from shoal.sim.engine import SimResult, Simulator, simulate
from shoal.sim.report import format_text
from shoal.sim.workload import TaskGroup, Workload, WorkloadError, load, parse

__all__ = ["SimResult", "Simulator", "TaskGroup", "Workload", "WorkloadError", "format_text",
           "load", "parse", "simulate"]
