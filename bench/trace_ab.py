"""The trace's cost on W1 in two source trees, in one run: each tree's W1 with the trace
off and on, the trees and the modes alternating.

    python bench/trace_ab.py BEFORE_TREE AFTER_TREE [--n 100000] [--reps 5] [--only W1]

Each cell is bench/trace_bench.py's (the local default: a head and one agent of 2 slots,
2 warm workers) run in a fresh process with that tree first on PYTHONPATH, so the head,
the agent and its workers run that tree's code. Per tree it reports the medians of the
wall time off and on, and of the CPU per task of the head, the agent, its workers and the
client, off and on: the trace's cost is on minus off within a tree; the trees' costs are
compared within the same run (a shared machine moves both alike). Results:
docs/benchmarks.md ("Issue 14: trace cost, next step").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CELL = """
import json, sys
sys.path.insert(0, {bench!r})
import trace_bench
print(json.dumps(trace_bench.cell({name!r}, {n}, {on})))
"""


def cell(tree: str, name: str, n: int, on: bool) -> list[float]:
    """(seconds, trace bytes, head, agent, workers, client CPU us per task) of one run."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run([sys.executable, "-c", CELL.format(bench=HERE, name=name, n=n, on=on)],
                         env=env, cwd=os.path.abspath(tree), capture_output=True, text=True,
                         check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--n", type=int, default=100_000, help="tasks (default 100000; W2: 2000)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", choices=("W1", "W2"), default="W1")
    args = ap.parse_args()
    trees = {"before": args.before, "after": args.after}
    got: dict[tuple[str, str], list[list[float]]] = {}
    for rep in range(args.reps):
        order = list(trees) if rep % 2 == 0 else list(reversed(trees))
        for tag in order:
            for mode in (("off", "on") if (rep // 2) % 2 == 0 else ("on", "off")):
                r = cell(trees[tag], args.only, args.n, mode == "on")
                got.setdefault((tag, mode), []).append(r)
                print(f"rep {rep + 1} {tag:<6} {mode:<3} {r[0]:.2f} s  us/task head {r[2]:.2f} "
                      f"agent {r[3]:.2f} workers {r[4]:.2f} client {r[5]:.2f}  "
                      f"all {sum(r[2:]):.2f}", file=sys.stderr, flush=True)
    print(f"\n{args.only} ({args.n} tasks), medians of {args.reps}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'tree':<8}{'off s':>7}{'on s':>7}{'wall':>8}{'pairs':>8}{'CPU':>7}{'trace MB':>9}"
          f"{'head':>14}{'agent':>14}{'workers':>16}{'client':>14}{'trace us':>9}{'med pair us':>12}")
    for tag in trees:
        off, on = got[(tag, "off")], got[(tag, "on")]
        w_off, w_on = statistics.median(r[0] for r in off), statistics.median(r[0] for r in on)
        pairs = statistics.median(b[0] / a[0] - 1 for a, b in zip(off, on, strict=True))
        m_off = [statistics.median(r[i] for r in off) for i in range(2, 6)]
        m_on = [statistics.median(r[i] for r in on) for i in range(2, 6)]
        pair_us = statistics.median(sum(b[2:]) - sum(a[2:]) for a, b in zip(off, on, strict=True))
        cols = "".join(f"{f'{x:.2f}/{y:.2f}':>{w}}" for x, y, w in zip(m_off, m_on, (14, 14, 16, 14),
                                                                        strict=True))
        print(f"{tag:<8}{w_off:>7.2f}{w_on:>7.2f}{(w_on / w_off - 1) * 100:>7.1f}%"
              f"{pairs * 100:>7.1f}%{(sum(m_on) / sum(m_off) - 1) * 100:>6.1f}%"
              f"{statistics.median(r[1] for r in on) / 1e6:>9.1f}{cols}"
              f"{sum(m_on) - sum(m_off):>9.2f}{pair_us:>12.2f}")
    print("(wall: of the median times; pairs: the median of each repetition's on/off; CPU: all\n"
          " processes' CPU per task, on over off; head ... client: CPU us per task off/on;\n"
          " trace us: what the trace adds per task in all processes, of the medians; med pair\n"
          " us: the median of each repetition's on - off)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
