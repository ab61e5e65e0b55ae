"""Placement rate of the scheduler core: tasks placed per second of CPU (issue 11).

    PYTHONPATH=. python bench/placement.py                     # mixed and all-1-core, 200,000 each
    PYTHONPATH=. python bench/placement.py -n 50000 --agents 16 --cores 32 --gpus 4

Drives :class:`shoal.head.core.SchedulerCore` directly (no sockets, no processes) with fake
agents: ``--agents`` x ``--cores`` cores x ``--gpus`` GPUs, each with a window of twice its
cores (prefetch 1, as the head's default). Two workloads of ``-n`` tasks, submitted in batches
of ``--batch`` as a client sends them:

- ``mixed``: 80% 1-core tasks, 15% 1-GPU tasks, 5% MPI tasks of 8 to 64 ranks (1 core each);
- ``1-core``: every task 1 core, no options (the baseline: the core's fast path).

Completions are instant and come in batches: each round, every agent reports all the tasks it
holds as finished (one RESULTS message per agent per round), and the core places what fits.
The run checks, after every event, that no agent has more cores, GPUs or memory in use than it
has (running tasks, MPI shares held for other agents' tasks). Reported: tasks placed per CPU
second (``time.process_time`` of the whole run: submits, placement, completions), rounds, and
for the mixed run the share of MPI tasks that went over several agents. The last line is one
JSON object (``@@BENCH {...}``) for scripts.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from shoal.head.core import SchedulerCore
from shoal.transport import protocol as P

OWNER = b"client"


def make_tasks(n: int, mixed: bool, seed: int = 11) -> list[list[Any]]:
    rnd = random.Random(seed)
    out: list[list[Any]] = []
    for tid in range(1, n + 1):
        opts = None
        if mixed:
            r = rnd.random()
            if r < 0.05:
                opts = {"ranks": rnd.randint(8, 64)}
            elif r < 0.20:
                opts = {"gpus": 1}
        out.append([tid, P.CMD, 0, b"", None, 1, -1, None, opts])
    return out


def check(core: SchedulerCore) -> None:
    """No agent has more in use than it has (the core's own counters)."""
    for a in core.agents.values():
        used = a.inflight + getattr(a, "held", 0)
        # inflight may exceed the cores by the prefetch window, never the window itself
        if used > max(a.window, a.slots) and used > a.slots * 2:
            raise AssertionError(f"agent {a.name!r}: {used} cores' worth > window {a.window}")
        if getattr(a, "held", 0) and a.inflight + a.held > a.slots:
            raise AssertionError(f"agent {a.name!r}: {a.inflight} + held {a.held} > {a.slots} cores")
        if getattr(a, "gpus_used", 0) > getattr(a, "gpus", 0):
            raise AssertionError(f"agent {a.name!r}: {a.gpus_used} GPUs in use > {a.gpus}")


def run(n: int, mixed: bool, agents: int, cores: int, gpus: int, batch: int,
        checks: bool) -> dict[str, Any]:
    core = SchedulerCore()
    names = [f"a{i:03d}".encode() for i in range(agents)]
    tasks = make_tasks(n, mixed)
    held: dict[bytes, list[int]] = {name: [] for name in names}
    done = 0
    rounds = 0
    multi = mpi = 0

    def take(d: Any) -> None:
        nonlocal multi, mpi, done
        for name, specs in d.dispatch.items():
            mine = held[name]
            for spec in specs:
                mine.append(spec[0])
                opts = spec[P.T_OPTS]
                if opts and "hosts" in opts:
                    mpi += 1
                    multi += len(opts["hosts"]) > 1
                    if sum(h[1] for h in opts["hosts"]) != opts["ranks"]:
                        raise AssertionError(f"task {spec[0]}: hosts {opts['hosts']} for {opts['ranks']} ranks")
        for items in d.resolve.values():
            for item in items:
                if item[1] != P.OK:
                    raise AssertionError(f"task {item[0]} failed: {bytes(item[2]).decode()}")
                done += 1

    t0 = time.process_time()
    w0 = time.perf_counter()
    for i, name in enumerate(names):
        if mixed:
            take(core.add_agent(name, cores, i + 1, gpus=gpus, node=name.decode()))
        else:
            take(core.add_agent(name, cores, i + 1))
        take(core.set_window(name, 2 * cores))
    pos = 0
    while done < n:
        if pos < n:  # the client keeps sending while results come back
            take(core.submit(tasks[pos:pos + batch], OWNER))
            pos += batch
        rounds += 1
        for name in names:
            mine = held[name]
            if not mine:
                continue
            held[name] = []
            take(core.finished(name, [[tid, P.OK, b"", None] for tid in mine]))
            if checks:
                check(core)
        if rounds > 50 * n:
            raise AssertionError(f"no progress: {done} of {n} done after {rounds} rounds")
    cpu = time.process_time() - t0
    wall = time.perf_counter() - w0
    return {"workload": "mixed" if mixed else "1-core", "tasks": n, "agents": agents,
            "cores": cores, "gpus": gpus, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
            "placed_per_cpu_s": round(n / cpu), "rounds": rounds, "mpi_tasks": mpi,
            "mpi_multi_agent": multi}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--tasks", type=int, default=200_000)
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--cores", type=int, default=32)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--batch", type=int, default=10_000, help="tasks per SUBMIT (default 10000)")
    ap.add_argument("--only", choices=("mixed", "1-core"), help="run one workload")
    ap.add_argument("--check", action="store_true",
                    help="check the usage counters after every event (slower: not for timing)")
    args = ap.parse_args(argv)
    rows = []
    for mixed in (True, False):
        if args.only and args.only != ("mixed" if mixed else "1-core"):
            continue
        row = run(args.tasks, mixed, args.agents, args.cores, args.gpus, args.batch, args.check)
        rows.append(row)
        extra = (f", {row['mpi_tasks']} MPI tasks ({row['mpi_multi_agent']} over several agents)"
                 if mixed else "")
        print(f"{row['workload']:>7}: {row['tasks']:,} tasks on {args.agents} agents x {args.cores} "
              f"cores x {args.gpus} GPUs: {row['cpu_s']} s CPU, {row['placed_per_cpu_s']:,} "
              f"tasks placed per CPU second, {row['rounds']} rounds{extra}")
    print("@@BENCH " + json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
