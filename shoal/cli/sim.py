"""`shoal sim WORKLOAD`: simulate a workload on the real scheduler core (shoal.sim)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sim", help="simulate a workload file on fake agents in virtual time",
                       description="Drive the real scheduler core with fake agents in virtual "
                       "time; the workload file (TOML or JSON) names the machine and the tasks "
                       "(docs/sim.md). Options override the file.")
    p.add_argument("workload", help="workload file (.toml or .json)")
    p.add_argument("--agents", type=int, action="append", metavar="N",
                   help="agent count (repeat for a sweep; default: the file's)")
    p.add_argument("--prefetch", type=int, help="the head's prefetch (window = cores x (1+P))")
    p.add_argument("--policy", choices=("fifo", "big-first", "plan"),
                   help="the core's order: oldest first, tasks with resources first, or "
                   "big-first with a plan in time for tasks with estimates (docs/sim.md)")
    p.add_argument("--results", choices=("batch", "single"),
                   help="results in the agent's batches, or one message per result")
    p.add_argument("--cost", choices=("measured", "zero"),
                   help="a head turn lasts the core's measured CPU time, or nothing")
    p.add_argument("--latency", type=float, metavar="S", help="one-way message latency (s)")
    p.add_argument("--scale-duration", type=float, metavar="F",
                   help="multiply every task's duration by F")
    p.add_argument("--estimate", type=float, metavar="ERR",
                   help="every task states its run time, off by up to ERR (0.2: +-20%%; 0: "
                   "exact); the head orders by it, the agents run the true durations")
    p.add_argument("--seed", type=int, help="random seed for sizes, durations and order")
    p.add_argument("--trace", metavar="FILE",
                   help="write the run's trace (shoal trace FILE reads it; virtual times)")
    p.add_argument("--json", action="store_true", help="print the results as JSON lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from shoal.sim import WorkloadError, format_text, load, simulate
    from shoal.trace.store import TraceError

    try:
        wl = load(args.workload)
        changes: dict[str, Any] = {}
        for key, name in (("prefetch", "prefetch"), ("policy", "policy"), ("results", "results"), ("cost", "cost"),
                          ("latency", "latency_s"), ("seed", "seed")):
            v = getattr(args, key)
            if v is not None:
                changes[name] = v
        if changes:
            wl = wl.with_(**changes)
        if args.scale_duration is not None:
            if not args.scale_duration > 0:
                raise WorkloadError(f"--scale-duration {args.scale_duration}: must be > 0")
            f = args.scale_duration
            wl = wl.with_(groups=tuple(replace(g, duration_s=(g.duration_s[0] * f,
                                                              g.duration_s[1] * f))
                                       for g in wl.groups))
        if args.estimate is not None:
            if not args.estimate >= 0:
                raise WorkloadError(f"--estimate {args.estimate}: must be >= 0")
            wl = wl.with_(groups=tuple(replace(g, estimate=True, estimate_error=args.estimate)
                                       for g in wl.groups))
    except WorkloadError as exc:
        print(f"shoal sim: {exc}", file=sys.stderr)
        return 2
    counts = args.agents or [wl.agents, *wl.sweep]
    if any(n < 1 for n in counts):
        print(f"shoal sim: --agents {min(counts)}: must be at least 1", file=sys.stderr)
        return 2
    if args.trace and len(counts) > 1:
        print("shoal sim: --trace takes one run; give one --agents", file=sys.stderr)
        return 2
    for n in counts:
        try:
            r = simulate(wl, n, trace=args.trace)
        except (OSError, TraceError) as exc:
            print(f"shoal sim: {exc}", file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(r.as_dict()), flush=True)
        else:
            print(format_text(r), flush=True)
        if r.unfinished:
            return 1
    return 0
