"""Workload definitions and the runner protocol shared by every peer script.

Standard library only: this module is imported by runners in each peer's own virtualenv (the
orchestrator puts ``bench/`` on PYTHONPATH, so worker processes of every peer import the task
functions below by reference, at equal cost for all).

A runner is started once per cell by ``bench/run.py`` and prints one line per measurement:

    @@BENCH {"workload": "W1", "n": 20000, "seconds": 0.93, ...}

Timed window for W1-W4: first submission to last result, after the runtime is up and one warm-up
task per slot has finished.  W5 is stamped with wall-clock ``time.time()`` when the first result
arrives; the orchestrator subtracts the time it launched the (cold) interpreter.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import subprocess
import sys
import time
import traceback

SEED = 20240611
MARK = "@@BENCH "

# Expected ideal makespans (list scheduling in submission order, zero overhead).
IDEAL = {(1000, 100): 10.421, (4000, 400): 10.542}


# --------------------------------------------------------------------------------------------
# task functions (imported by reference in every peer's workers)


def inc(x):
    return x + 1


def run_true():
    """W2 for Python peers: one command task = one subprocess.run of /bin/true."""
    return subprocess.run(["/bin/true"]).returncode


def run_sleep(d):
    """W3 for Python peers: ``sleep d`` as a child process."""
    return subprocess.run(["sleep", d]).returncode


def warm(i, n, dirpath, timeout=None):
    """Warm-up task: a barrier that returns True once ``n`` warm-up tasks run at the same time.

    Submitting ``n`` of these to a runtime with ``n`` slots forces every slot (worker process,
    thread, engine) to be started and to have run one task before the timed window opens.  It
    gives up after ``timeout`` and returns False (a runtime may queue two of them behind each other
    on one worker), and the harness then runs another round.
    """
    open(os.path.join(dirpath, f"w{i}"), "w").close()
    if timeout is None:  # starting many worker processes on 2 cores takes a while
        timeout = 5.0 + 0.6 * n
    deadline = time.time() + timeout
    while len(os.listdir(dirpath)) < n:
        if time.time() > deadline:
            return False
        time.sleep(0.005)
    return True


# --------------------------------------------------------------------------------------------
# workload data


def durations(n):
    """The W3 sleep durations as strings with 3 decimals (what the commands receive)."""
    rng = random.Random(SEED)
    return [f"{round(rng.uniform(0.9, 1.1), 3):.3f}" for _ in range(n)]


def ideal_makespan(ds, slots):
    """Makespan of ``ds`` list-scheduled in order on ``slots`` slots with zero overhead."""
    ends = [0.0] * slots
    heapq.heapify(ends)
    for d in ds:
        t = heapq.heappop(ends)
        heapq.heappush(ends, t + float(d))
    return max(ends)


def check_ideal():
    for (n, slots), want in IDEAL.items():
        got = round(ideal_makespan(durations(n), slots), 3)
        assert got == want, f"ideal makespan for {n} tasks on {slots} slots: {got} != {want}"


def tree_tasks(depth):
    return 2 ** (depth + 1) - 1


# --------------------------------------------------------------------------------------------
# runner protocol


def emit(**rec):
    rec.setdefault("t", time.time())
    sys.stdout.write(MARK + json.dumps(rec) + "\n")
    sys.stdout.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", default="W5,W1,W1map,W2,W4")
    p.add_argument("--n1", type=int, default=20000)
    p.add_argument("--n2", type=int, default=2000)
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--ntasks", type=int, default=1000, help="W3 tasks")
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--tool", default="", help="variant (cmdline: xargs or parallel)")
    p.add_argument("--workdir", default=None, help="scratch directory for this cell")
    return p.parse_args(argv)


class Runner:
    """Base class of the Python-API peers. Subclasses implement start/stop and the workloads.

    ``start(slots, kind)``: bring up a runtime with ``slots`` slots; kind is "py" (2 Python
    workers for W1/W2/W4) or "cmd" (W3 command slots).  ``first()`` runs one trivial task and
    returns its result (W5).  ``warmup(slots, dirpath)`` runs one ``warm`` task per slot.
    """

    name = "?"
    version = "?"
    supports = ("W5", "W1", "W1map", "W2", "W3", "W4")

    def start(self, slots, kind):
        raise NotImplementedError

    def stop(self):
        pass

    def first(self):
        raise NotImplementedError

    def warmup(self, slots, dirpath):
        raise NotImplementedError

    def w1(self, n):
        raise NotImplementedError

    def w1map(self, n):
        raise NotImplementedError

    def w2(self, n):
        raise NotImplementedError

    def w3(self, ds):
        raise NotImplementedError

    def w4(self, depth):
        raise NotImplementedError


class ExecutorRunner(Runner):
    """A peer that is a ``concurrent.futures.Executor`` (``self.ex``): submit per task, map."""

    def first(self):
        return self.ex.submit(inc, 1).result()

    def warmup(self, slots, dirpath):
        fs = [self.ex.submit(warm, i, slots, dirpath) for i in range(slots)]
        return [f.result() for f in fs]

    def w1(self, n):
        fs = [self.ex.submit(inc, i) for i in range(n)]
        return [f.result() for f in fs]

    def w1map(self, n):
        return list(self.ex.map(inc, range(n)))


def _warm_dir(workdir, tag):
    d = os.path.join(workdir, "warm-" + tag)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    return d


def _warm(runner, slots, workdir, tag, rounds=2):
    """Warm-up rounds until one round had a task on every slot at once (or rounds run out)."""
    for r in range(rounds):
        res = runner.warmup(slots, _warm_dir(workdir, f"{tag}{r}"))
        if res is None or all(res):
            emit(event="ready", warmup_rounds=r + 1)
            return
    emit(event="ready", warmup_rounds=rounds, warmup_complete=False)


def timed(fn, *args):
    t0 = time.perf_counter()
    res = fn(*args)
    return time.perf_counter() - t0, res


def drive(runner, argv=None):
    """Run the requested workloads on ``runner`` in this (fresh) process and emit results."""
    a = parse_args(argv)
    workdir = a.workdir or os.getcwd()
    os.makedirs(workdir, exist_ok=True)
    wl = [w for w in a.workloads.split(",") if w]
    emit(event="info", peer=runner.name, version=runner.version, python=sys.version.split()[0])
    if "W3" in wl:
        ds = durations(a.ntasks)
        runner.start(a.slots, "cmd")
        try:
            _warm(runner, a.slots, workdir, "w3")
            secs, _ = timed(runner.w3, ds)
            ideal = ideal_makespan(ds, a.slots)
            emit(
                workload="W3",
                n=a.ntasks,
                slots=a.slots,
                seconds=secs,
                ideal=ideal,
                overhead=secs / ideal - 1.0,
            )
        finally:
            runner.stop()
        return
    runner.start(2, "py")
    try:
        r = runner.first()
        t_first = time.time()
        assert r == 2, r
        if "W5" in wl:
            # CLI peers are driven by this (Python) harness process: their cold start is timed
            # from when the harness launches the tool, not from the harness's own start.
            emit(workload="W5", t_first=t_first, t_launch=getattr(runner, "t_launch", None))
        _warm(runner, 2, workdir, "py")
        for w in wl:
            if w == "W5":
                continue
            if w not in runner.supports:
                emit(workload=w, na=True)
                continue
            try:
                if w == "W1":
                    secs, res = timed(runner.w1, a.n1)
                    _check_inc(res, a.n1)
                    emit(workload=w, n=a.n1, seconds=secs, rate=a.n1 / secs)
                elif w == "W1map":
                    secs, res = timed(runner.w1map, a.n1)
                    _check_inc(res, a.n1)
                    emit(workload=w, n=a.n1, seconds=secs, rate=a.n1 / secs)
                elif w == "W2":
                    secs, res = timed(runner.w2, a.n2)
                    assert len(res) == a.n2 and not any(res), "W2: bad results"
                    emit(workload=w, n=a.n2, seconds=secs, rate=a.n2 / secs)
                elif w == "W4":
                    secs, res = timed(runner.w4, a.depth)
                    assert res == 2**a.depth, res
                    emit(workload=w, n=tree_tasks(a.depth), seconds=secs)
                else:
                    emit(workload=w, error="unknown workload")
            except Exception as e:  # one failed workload must not lose the others
                traceback.print_exc()
                emit(workload=w, error=f"{type(e).__name__}: {e}")
    finally:
        runner.stop()


def _check_inc(res, n):
    res = list(res)
    assert len(res) == n and res[0] == 1 and res[-1] == n, "W1: bad results"
    assert sum(res) == n * (n + 1) // 2, "W1: bad sum"
