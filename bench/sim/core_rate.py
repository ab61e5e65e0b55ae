"""The scheduler core alone: decisions per second of CPU with results one at a time.

    python bench/sim/core_rate.py [AGENTS] [TASKS] [--estimate]   # default 2048, 1,000,000

Agents of 128 cores with prefetch 1 (window 256); one SUBMIT of every task, then each
dispatched task's result comes back alone (the hardest case for the head: one finished()
per result), refilling as the core decides. ``--estimate``: every task states a run time of
1-10 s (as ``shoal sim million.toml --estimate 0``: longest first, free cores only, no
prefetch). The collector is the head process's (``core.tune_gc``). Reports the submit's cost per task and the results' rate (time.thread_time:
CPU, not wall time; the machine may be shared).
"""

from __future__ import annotations

import random
import sys
import time

from shoal.head.core import SchedulerCore, tune_gc
from shoal.transport import protocol as P


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    estimate = "--estimate" in sys.argv
    agents = int(args[0]) if args else 2048
    n = int(args[1]) if len(args) > 1 else 1_000_000
    tune_gc()  # as the head's process (python -m shoal.head)
    core = SchedulerCore()
    names = [f"a{i}".encode() for i in range(agents)]
    for i, name in enumerate(names):
        core.add_agent(name, 128, i + 1)
        core.set_window(name, 256)
    payload = {"argv": ["sleep", "1"]}
    rng = random.Random(14)
    specs = [[i, P.CMD, 0, payload, None, 1, -1, None,
              {"estimate": rng.uniform(1, 10)} if estimate else None, 0, None]
             for i in range(1, n + 1)]
    t = time.thread_time()
    d = core.submit(specs, b"client", owner_num=1)
    submit_s = time.thread_time() - t
    out = [(a, s[0], s[9]) for a, sp in d.dispatch.items() for s in sp]
    first = len(out)
    t = time.thread_time()
    i = 0
    while i < len(out):
        a, tid, attempt = out[i]
        i += 1
        d = core.finished(a, [[tid, P.OK, b"", attempt, None]])
        for agent, sp in d.dispatch.items():
            out.extend((agent, s[0], s[9]) for s in sp)
    results_s = time.thread_time() - t
    print(f"{agents} agents x 128 cores, {n:,} tasks{' with estimates' if estimate else ''}: "
          f"submit {submit_s:.2f} s CPU ({submit_s / n * 1e6:.2f} us a task, {first:,} dispatched "
          f"at once); {i:,} results one at a time in {results_s:.2f} s CPU = {i / results_s:,.0f}/s "
          f"({results_s / i * 1e6:.2f} us each); all decisions: {n / (submit_s + results_s):,.0f}/s")


if __name__ == "__main__":
    main()
