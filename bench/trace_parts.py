"""Where a traced W1 spends: the trace's own CPU per task, part by part (robust on a busy
machine, where whole-run CPU moves by more than the trace costs).

    PYTHONPATH=. python bench/trace_parts.py [--n 100000] [--reps 3]

1. head: a real traced W1 (the local default of bench/trace_bench.py: a head and one agent
   of 2 slots) with every ``Recorder`` method timed by ``time.thread_time`` inside the head.
2. agent and workers: their trace work on 200,000 tasks in worker messages of 64,
   emulated with the real msgpack and the real ``shoal.trace.columns.AgentTimes``: the
   results' way from a worker through the agent to the head's message, off and on.

Results: docs/benchmarks.md ("Issue 14: trace format 3", "Issue 14: trace cost, next step").
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from itertools import repeat
from operator import itemgetter
from typing import Any

import msgpack

METHODS = ("submitted", "dispatched", "results", "flush", "resolved", "funcs", "closed")


def as_head(out: str, argv: list[str]) -> None:
    """Run ``shoal.head`` here with the recorder's methods timed; totals to ``out``."""
    from shoal.trace import store

    acc: dict[str, list[float]] = {}

    def timed(name: str) -> None:
        fn = getattr(store.Recorder, name)

        def wrapper(self: Any, *a: Any, **k: Any) -> Any:
            t = time.thread_time()
            try:
                return fn(self, *a, **k)
            finally:
                x = acc.setdefault(name, [0, 0.0])
                x[0] += 1
                x[1] += time.thread_time() - t
        setattr(store.Recorder, name, wrapper)

    for name in METHODS:
        timed(name)

    def dump() -> None:
        with open(out, "w") as fh:
            json.dump(acc, fh)
    atexit.register(dump)
    sys.argv = ["shoal.head", *argv]
    runpy.run_module("shoal.head", run_name="__main__")


def head_parts(n: int) -> dict[str, list[float]]:
    """One traced W1 of ``n`` tasks; the recorder's [calls, seconds] per method."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import trace_bench
    from journal_bench import w1

    from shoal import Command

    tmp = tempfile.mkdtemp(prefix="stp")
    out = os.path.join(tmp, "parts.json")
    real = subprocess.Popen

    def popen(args: list[str], **kw: Any) -> Any:  # the head runs under as_head
        if args[1:3] == ["-m", "shoal.head"]:
            args = [args[0], os.path.abspath(__file__), "--as-head", out, *args[3:]]
        return real(args, **kw)

    trace_bench.subprocess.Popen = popen  # type: ignore[assignment]
    try:
        with trace_bench.runtime(os.path.join(tmp, "run.trace"), 2, 2) as (ex, _, _):
            ex.submit(Command(["/bin/true"])).result()
            w1(ex, n)
    finally:
        trace_bench.subprocess.Popen = real  # type: ignore[assignment]
    with open(out) as fh:
        parts: dict[str, list[float]] = json.load(fh)
    subprocess.run(["rm", "-rf", tmp], check=False)
    return parts


def agent_worker_us(mode: str, n: int = 200_000, batch: int = 64) -> float:
    """CPU us per task of the results' way worker -> agent -> head message: ``mode`` off,
    on (this checkout, format 4: the agent stamps its launch time on the spec, the worker
    sends it back with the start and end it reads anyway, the agent copies the bytes),
    format3 (as shoal did at 7a9aba1: the agent's launch table, a dict entry and two
    ``time.time()`` per task in the worker) or format2 (a list of six per result, made by
    the worker, filled in by the agent and packed again, as shoal did at 207e09f). Every
    mode reads the monotonic clock before and after each task, as the worker does."""
    from shoal.trace.columns import AgentTimes

    pack = msgpack.Packer(use_bin_type=True).pack
    on, f3, f2 = mode == "on", mode == "format3", mode == "format2"
    mono, wall, nan = time.monotonic, time.time, float("nan")
    t_start: dict[int, float] = {}
    launch: dict[int, float] = {}
    cols = AgentTimes()
    t0 = time.thread_time()
    for b0 in range(0, n, batch):
        tids = range(b0, b0 + batch)
        specs = [[tid, 0, 5, b"", None, 1, None, None, None, 1, 1, tid] for tid in tids]
        if on:  # the agent stamps the specs it sends (one clock read per message)
            now = mono()
            for spec in specs:
                if len(spec) > 12:
                    spec[12] = now
                else:
                    spec.append(now)
        elif f3:  # the agent's launch table (one clock read per dispatch pass)
            now = wall()
            for tid in tids:
                launch[tid] = now
        elif f2:
            for tid in tids:
                launch[tid] = wall()
        specs = msgpack.unpackb(pack([4, specs, {}]), raw=False, strict_map_key=False)[1]
        out: list[list[Any]] = []
        times = array("d")
        for spec in specs:  # the worker runs them
            tid = spec[0]
            start = mono()
            if f3:
                t_start[tid] = wall()
            elif f2:
                t_start[tid] = wall()
                out.append([tid, 0, b"\x80", None, None,
                            [None, t_start.pop(tid, None), wall(), None, None, None]])
            if not f2:
                out.append([tid, 0, b"\x80", None, None])
            end = mono()
            if on:
                times.append(spec[12] if len(spec) > 12 else nan)
                times.append(start)
                times.append(end)
            elif f3:
                times.append(t_start.pop(tid, nan))
                times.append(wall())
        msg = msgpack.unpackb(pack([3, out, {}, times.tobytes()] if on or f3 else [3, out, {}]),
                              raw=False, strict_map_key=False)
        res = []
        for item in msg[1]:  # the agent passes them on
            item[3] = 1
            if f2:
                tr = item[5]
                tr[0] = launch.pop(item[0], None)
                tr[5] = 0
            res.append(item)
        if on:
            cols.worker_results(msg[1], res, msg[3], 0, None)
            pack([3, res, cols.take(len(res))])
        elif f3:  # format 3's AgentTimes: started/ended from the worker, launched popped
            se = array("d")
            se.frombytes(msg[3])
            la = array("d", map(launch.pop, map(itemgetter(0), res), repeat(nan)))
            pack([3, res, pack({"n": len(res), "launched": la.tobytes(), "se": se.tobytes(),
                                "worker": array("i", repeat(0, len(res))).tobytes(),
                                "extra": None})])
        elif f2:
            pack([3, res, pack(list(map(list.pop, res)))])
        else:
            pack([3, res])
    return (time.thread_time() - t0) / n * 1e6


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--as-head":
        as_head(sys.argv[2], sys.argv[3:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="W1 tasks (default 100000)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    runs = [head_parts(args.n) for _ in range(args.reps)]
    print(f"head recorder, us per task (median of {args.reps} traced W1 of {args.n}):")
    total = []
    for name in METHODS:
        per = [r.get(name, [0, 0.0])[1] / args.n * 1e6 for r in runs]
        calls = [r.get(name, [0, 0.0])[0] for r in runs]
        print(f"  {name:<11}{statistics.median(per):6.3f}   calls {min(calls)}-{max(calls)}")
    total = [sum(r[k][1] for k in r) / args.n * 1e6 for r in runs]
    print(f"  {'all':<11}{statistics.median(total):6.3f}   ({min(total):.3f}-{max(total):.3f})")
    got: dict[str, list[float]] = {"off": [], "format2": [], "format3": [], "on": []}
    for _ in range(args.reps):
        for mode, us in got.items():
            us.append(agent_worker_us(mode))
    off, f2, f3, on = (statistics.median(got[m]) for m in ("off", "format2", "format3", "on"))
    print(f"agent + workers, emulated, us per task: off {off:.3f}; format 2 {f2:.3f} "
          f"(trace +{f2 - off:.3f}); format 3 {f3:.3f} (trace +{f3 - off:.3f}); this checkout "
          f"{on:.3f} (trace +{on - off:.3f})")
    print(f"(load average {' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
