"""shoal against SCOOP 0.7.2 (and serial / multiprocessing.Pool) on SCOOP-style programs.

Cells (issue 12):

- ``onemax``: DEAP's onemax GA at the example's own size (300 individuals of 100 bits,
  40 generations, cxpb 0.5, mutpb 0.2, seed 64) with ``toolbox.register("map",
  futures.map)``; ``onemax2ms``: the same with each evaluation spinning 2 ms of CPU time
  (``time.thread_time``: the same work however busy the machine).
  Runtimes: shoal, SCOOP, serial (builtin ``map``); for onemax2ms also ``shoal-c1``,
  shoal with ``futures.map(..., chunksize=1)`` (one task per evaluation, as SCOOP sends
  them). Every runtime must print the same final generation (checked).
- ``w1map``: bench/run.py's W1map cell, ``list(futures.map(inc, range(20000)))``;
  shoal, SCOOP, ``Pool(2).map``.
- ``mapreduce``: ``futures.mapReduce(sq, operator.add, range(N))`` with N = 1,000,000;
  shoal, SCOOP (``--scoop-n`` items, default N), ``functools.reduce`` over
  ``Pool(2).map``, serial ``functools.reduce(map)``.

Every runtime gets 2 workers: ``python -m shoal -n 2``, ``python -m scoop -n 2`` (its
origin plus one worker, both run tasks), ``Pool(2)``. Each run is a fresh process; the
timed window starts after the runtime is up and one small map ran (``wall`` is the whole
process, start-up included; ``cpu`` the CPU seconds of the process and every descendant it
waited for). Runtimes alternate within each repetition; medians reported.

    PYTHONPATH=. .venv/bin/python bench/scoop_bench.py [--cells onemax,w1map,mapreduce]
        [--reps 5] [--scoop-n 100000] [--json FILE]

Needs scoop==0.7.2.0 and deap in the venv (scripts/setup-test-deps.sh, or
``bash bench/setup_peers.sh scoop``, which installs them into the project venv).
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "@@SCOOPBENCH "
CELLS = {  # cell -> runtimes
    "onemax": ("shoal", "scoop", "serial"),
    "onemax2ms": ("shoal", "shoal-c1", "scoop", "serial"),
    "w1map": ("shoal", "scoop", "pool"),
    "mapreduce": ("shoal", "scoop", "pool", "serial"),
}


# ---- the program (run under each runtime) --------------------------------------------
def inc(x: int) -> int:
    return x + 1


def sq(x: int) -> int:
    return x * x


def eval_onemax(individual, spin: float = 0.0):
    if spin:
        end = time.thread_time() + spin
        while time.thread_time() < end:
            pass
    return (sum(individual),)


def _futures(runtime: str):
    if runtime.startswith("shoal"):
        from shoal import futures
    elif runtime == "scoop":
        from scoop import futures
    else:
        futures = None
    return futures


def onemax(mapper, spin: float) -> tuple[float, str]:
    """DEAP's onemax (the parameters of DEAP's and SCOOP's examples); (seconds, last
    generation's logbook line)."""
    import array
    import random

    import numpy
    from deap import algorithms, base, creator, tools

    if not hasattr(creator, "FitnessMax"):
        creator.create("FitnessMax", base.Fitness, weights=(1.0,))
        creator.create("Individual", array.array, typecode="b", fitness=creator.FitnessMax)
    tb = base.Toolbox()
    tb.register("attr_bool", random.randint, 0, 1)
    tb.register("individual", tools.initRepeat, creator.Individual, tb.attr_bool, 100)
    tb.register("population", tools.initRepeat, list, tb.individual)
    tb.register("evaluate", functools.partial(eval_onemax, spin=spin))
    tb.register("mate", tools.cxTwoPoint)
    tb.register("mutate", tools.mutFlipBit, indpb=0.05)
    tb.register("select", tools.selTournament, tournsize=3)
    tb.register("map", mapper)
    random.seed(64)
    t0 = time.perf_counter()
    pop = tb.population(n=300)
    stats = tools.Statistics(lambda ind: ind.fitness.values)
    for name, fn in (("avg", numpy.mean), ("std", numpy.std), ("min", numpy.min),
                     ("max", numpy.max)):
        stats.register(name, fn)
    _, log = algorithms.eaSimple(pop, tb, cxpb=0.5, mutpb=0.2, ngen=40, stats=stats,
                                 verbose=False)
    secs = time.perf_counter() - t0
    last = log[-1]
    return secs, f"gen {last['gen']} avg {last['avg']:.4f} std {last['std']:.4f} max {last['max']}"


def program(cell: str, runtime: str, n: int) -> dict:
    futures = _futures(runtime)
    pool = None
    if runtime == "pool":
        from multiprocessing import Pool

        pool = Pool(2)
        mapper = pool.map
    elif runtime == "shoal-c1":
        mapper = functools.partial(futures.map, chunksize=1)
    elif futures is not None:
        mapper = futures.map
    else:
        mapper = map
    list(mapper(inc, range(4)))  # the runtime is up and has run tasks
    out: dict = {"cell": cell, "runtime": runtime}
    try:
        if cell in ("onemax", "onemax2ms"):
            secs, out["check"] = onemax(mapper, 0.002 if cell == "onemax2ms" else 0.0)
        elif cell == "w1map":
            t0 = time.perf_counter()
            res = list(mapper(inc, range(n)))
            secs = time.perf_counter() - t0
            assert len(res) == n and sum(res) == n * (n + 1) // 2
            out["rate"] = n / secs
        elif cell == "mapreduce":
            t0 = time.perf_counter()
            if futures is not None:
                r = futures.mapReduce(sq, operator.add, range(n))
            else:
                r = functools.reduce(operator.add, mapper(sq, range(n)))
            secs = time.perf_counter() - t0
            assert r == sum(x * x for x in range(n)), r
        else:
            raise SystemExit(f"unknown cell {cell}")
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    out.update(seconds=secs, n=n)
    return out


# ---- the driver ----------------------------------------------------------------------
def command(cell: str, runtime: str, n: int) -> list[str]:
    me = [os.path.abspath(__file__), "--program", cell, "--runtime", runtime, "--n", str(n)]
    if runtime in ("shoal", "shoal-c1", "scoop"):
        return [sys.executable, "-m", runtime.split("-")[0], "-n", "2", *me]
    return [sys.executable, *me]


def run_one(cell: str, runtime: str, n: int, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run(command(cell, runtime, n), capture_output=True, text=True, env=env,
                           timeout=timeout, cwd=HERE)
    except subprocess.TimeoutExpired:
        return {"cell": cell, "runtime": runtime, "error": f"over {timeout:.0f} s", "n": n}
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            rec = json.loads(line[len(MARK):])
            rec["wall"] = wall
            rec["cpu"] = cpu
            return rec
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"cell": cell, "runtime": runtime, "error": f"status {p.returncode}: {tail}", "n": n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default="onemax,onemax2ms,w1map,mapreduce")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--reps-slow", type=int, default=3, help="repetitions of onemax2ms")
    ap.add_argument("--n-w1map", type=int, default=20000)
    ap.add_argument("--n-mapreduce", type=int, default=1_000_000)
    ap.add_argument("--scoop-n", type=int, help="SCOOP's mapReduce items (default: the same)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--json", help="write every run's record here")
    ap.add_argument("--program", help=argparse.SUPPRESS)
    ap.add_argument("--runtime", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.program:
        print(MARK + json.dumps(program(a.program, a.runtime, a.n)), flush=True)
        return 0
    records: list[dict] = []
    for cell in a.cells.split(","):
        runtimes = CELLS[cell]
        for rep in range(a.reps_slow if cell == "onemax2ms" else a.reps):
            order = runtimes if rep % 2 == 0 else runtimes[::-1]  # alternate A/B/C, C/B/A
            for rt in order:
                n = {"w1map": a.n_w1map, "mapreduce": a.n_mapreduce}.get(cell, 0)
                if cell == "mapreduce" and rt == "scoop" and a.scoop_n:
                    n = a.scoop_n
                rec = run_one(cell, rt, n, a.timeout)
                rec["rep"] = rep
                records.append(rec)
                print(json.dumps(rec), file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(records, fh, indent=1)
    print(table(records))
    return 0


def table(records: list[dict]) -> str:
    """Markdown: per cell and runtime, median seconds (rate for w1map), median wall, and
    the ratio to shoal's median."""
    out = ["| cell | runtime | n | median s | median wall s | median CPU s | vs shoal | runs | check |",
           "|---|---|---|---|---|---|---|---|---|"]
    cells: dict[str, dict[str, list[dict]]] = {}
    for r in records:
        cells.setdefault(r["cell"], {}).setdefault(r["runtime"], []).append(r)
    for cell, by in cells.items():
        ok = {rt: [r for r in rs if "error" not in r] for rt, rs in by.items()}
        base = statistics.median(r["seconds"] for r in ok["shoal"]) if ok.get("shoal") else None
        checks = {r.get("check") for rs in ok.values() for r in rs} - {None}
        for rt, rs in by.items():
            good = ok[rt]
            if not good:
                out.append(f"| {cell} | {rt} | {rs[0]['n']} | {rs[0]['error']} | | | | {len(rs)} | |")
                continue
            med = statistics.median(r["seconds"] for r in good)
            wall = statistics.median(r["wall"] for r in good)
            cpu = statistics.median(r["cpu"] for r in good)
            rate = f" ({good[0]['n'] / med:,.0f}/s)" if cell == "w1map" else ""
            ratio = f"{med / base:.2f}x" if base else ""
            check = ("same" if len(checks) == 1 else "DIFFERENT") if checks else ""
            out.append(f"| {cell} | {rt} | {good[0]['n'] or ''} | {med:.3f}{rate} | {wall:.2f} | "
                       f"{cpu:.2f} | {ratio} | {len(good)}/{len(rs)} | {check} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
