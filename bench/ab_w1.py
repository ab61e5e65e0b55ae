"""W1 (one submit per no-op task, 2 workers) between two source trees, alternating in one run.

    python bench/ab_w1.py BEFORE_TREE AFTER_TREE [--n 30000] [--reps 10]

For a change on the hot path: e.g. ``git archive main | tar -x -C /tmp/before`` and this
checkout. Each repetition runs both trees once, in alternating order, each in a fresh
process; it reports the median wall time of the W1 cell and the median CPU of the whole run
(client, head, agent and workers, start-up and warm-up included): CPU is what a shared,
noisy machine blurs least.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CELL = """
import json, resource, time
from shoal import Executor
def inc(x):
    return x + 1
with Executor(workers=2) as ex:
    ex.submit(inc, -1).result()
    list(ex.map(inc, range(100)))
    t0 = time.perf_counter()
    fs = [ex.submit(inc, i) for i in range({n})]
    assert [f.result() for f in fs] == list(range(1, {n} + 1))
    wall = time.perf_counter() - t0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps([wall, me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime]))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--n", type=int, default=30000)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    trees = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    wall: dict[str, list[float]] = {k: [] for k in trees}
    cpu: dict[str, list[float]] = {k: [] for k in trees}
    for rep in range(a.reps):
        order = list(trees.items()) if rep % 2 == 0 else list(trees.items())[::-1]
        for name, path in order:
            r = subprocess.run([sys.executable, "-c", CELL.format(n=a.n)], cwd=path, text=True,
                               capture_output=True, env={**os.environ, "PYTHONPATH": path},
                               timeout=600, check=True)
            w, c = json.loads(r.stdout.strip().splitlines()[-1])
            wall[name].append(w)
            cpu[name].append(c)
    for name in trees:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"{name:6s} W1 {a.n} tasks: median {w:.3f} s ({a.n / w:,.0f} tasks/s); "
              f"CPU of the run: median {c:.3f} s")


if __name__ == "__main__":
    main()
