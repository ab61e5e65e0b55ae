#!/usr/bin/env python3
"""The spawn helper's own CPU per command, A/B over source trees (issue 13).

    python bench/helper_cpu.py --trees /tmp/base,. [-n 4000] [--rounds 7] [--mode capture]

Each round runs, once per tree (trees alternating, the tree first on ``PYTHONPATH``), a
process that plays the agent: it forks a ``shoal.agent.spawner.Spawner``, caps it at 2
cores and keeps ``--ahead`` commands handed to it beyond what has been reported, as the
agent's short-command window does, one ``flush`` per turn. The command is
``Command(["/bin/true"])``'s spec (``--mode capture``, the Executor's default), or a task
file's ``/bin/sh -c /bin/true`` line with both streams discarded (``--mode devnull``, what
``shoal run --discard-output`` sends). Printed: the median over the rounds of the helper's
CPU per command (``/proc/PID/schedstat``, nanoseconds, read just before it is closed), its
voluntary context switches per command, this process's (the "agent") CPU per command, and
the wall time per command.

Only the helper and its commands run, so the number moves with what the helper does per
command and little else; bench/cpu_split.py measures the whole runtime. Standard library
and shoal only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, select, sys, time
from shoal.agent import limits
from shoal.agent.spawner import Spawner
n, ahead, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def spec():
    if mode == "capture":
        return {"argv": ["/bin/true"]}
    return {"argv": ["/bin/sh", "-c", "/bin/true"], "stdout": "devnull", "stderr": "devnull"}
def stats(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        ns = int(f.read().split()[0])
    sw = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                sw = int(line.split()[1])
    return ns, sw
sp = Spawner()
sp.config(dict(os.environ), limits.max_output)
sp.cap(2)
t0 = time.perf_counter()
c0 = time.process_time()
h0 = stats(sp.pid)
sent = done = 0
while done < n:
    while sent < n and sent - done < ahead + 2:
        sent += 1
        sp.run(sent, sent, spec(), 1)
    sp.flush()
    select.select([sp.fileno()], [], [], 1.0)
    for r in sp.receive():
        assert r[1] == 0, r
        done += 1
wall = time.perf_counter() - t0
cpu = time.process_time() - c0
h1 = stats(sp.pid)
sp.close(5.0)
print(json.dumps({"helper": (h1[0] - h0[0]) / 1e9, "sw": h1[1] - h0[1], "agent": cpu,
                  "wall": wall}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trees", required=True, help="comma-separated source trees (PYTHONPATH)")
    ap.add_argument("-n", type=int, default=4000, help="commands per run")
    ap.add_argument("--ahead", type=int, default=80, help="commands handed beyond the 2 running")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--mode", choices=("capture", "devnull"), default="capture")
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    runs: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for t in trees:
            env = dict(os.environ, PYTHONPATH=t)
            out = subprocess.run([sys.executable, "-c", CHILD, str(args.n), str(args.ahead),
                                  args.mode], env=env, cwd="/", capture_output=True, text=True,
                                 check=True)
            runs[t].append(json.loads(out.stdout.strip().splitlines()[-1]))
    n = args.n
    print(f"{n} commands ({args.mode}), median of {args.rounds} alternating rounds, per command; "
          f"load {os.getloadavg()[0]:.1f}")
    print("| tree | helper CPU us | helper switches | agent CPU us | wall us |")
    print("|---|---|---|---|---|")
    for t in trees:
        med = {k: statistics.median(r[k] for r in runs[t]) for k in ("helper", "sw", "agent", "wall")}
        spread = sorted(r["helper"] / n * 1e6 for r in runs[t])
        print(f"| {t} | {med['helper'] / n * 1e6:.1f} ({spread[0]:.0f}-{spread[-1]:.0f}) | "
              f"{med['sw'] / n:.2f} | {med['agent'] / n * 1e6:.1f} | {med['wall'] / n * 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
