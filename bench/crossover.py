#!/usr/bin/env python3
"""`shoal run` against ``xargs -P`` by the number of lines: its start against its pace.

    python bench/crossover.py [--sizes 500,1000,2000,5000,20000] [--rounds 5] [-P 2] \\
        [--shoal PATH] [--line /bin/true]

Runs N copies of one command line (``/bin/true``, as W2) with both tools, the whole tool
timed as a user times it (launch to exit, ``--discard-output --no-progress --no-summary``
for shoal, ``xargs -PN -I{} LINE`` fed N lines), sizes and tools interleaved round by
round; prints the medians, their ratio, and a least-squares fit ``T(N) = start + N x
per-command`` for each tool: ``start`` is what a run pays once (for shoal its interpreter,
imports, runtime start and teardown), ``per-command`` the pace, and where the two lines
cross is the smallest task file on which `shoal run` finishes first.

``--shoal`` is the ``shoal`` program to time (default: ``bench/.envs/shoal-installed/bin/shoal``
as ``bench/run.py`` builds it, else ``shoal`` on PATH); the source tree comes from
``PYTHONPATH`` as usual. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``t = a + b * n``: (a, b)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="500,1000,2000,5000,20000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-P", "--slots", type=int, default=2)
    ap.add_argument("--shoal", default=None)
    ap.add_argument("--line", default="/bin/true", help="the command of every line")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    if len(sizes) < 2:
        ap.error("--sizes needs at least two sizes for the fit")
    shoal = a.shoal or os.path.join(HERE, ".envs", "shoal-installed", "bin", "shoal")
    if not os.path.exists(shoal):
        shoal = shutil.which("shoal") or ""
    if not shoal or not shutil.which("xargs"):
        sys.exit("needs xargs and a shoal program (--shoal)")
    tools = {
        "xargs -P": lambda path: (["xargs", f"-P{a.slots}", "-I{}", *a.line.split()], path),
        "shoal run": lambda path: ([shoal, "run", "-", "-j", str(a.slots), "--discard-output",
                                    "--no-progress", "--no-summary"], path),
    }
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="crossover-") as tmp:
        files = {}
        for n in sizes:
            files[n] = os.path.join(tmp, f"{n}.txt")
            with open(files[n], "w") as fh:
                fh.write((a.line + "\n") * n)
        for r in range(a.rounds):
            for n in sizes:
                for name, make in tools.items():
                    argv_, path = make(files[n])
                    with open(path, "rb") as stdin:
                        t0 = time.perf_counter()
                        p = subprocess.run(argv_, stdin=stdin, stdout=subprocess.DEVNULL, cwd=tmp)
                        took = time.perf_counter() - t0
                    if p.returncode != 0:
                        sys.exit(f"{name} on {n} lines exited {p.returncode}")
                    times.setdefault((name, n), []).append(took)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"{a.slots} slots, `{a.line}` per line, medians of {a.rounds} interleaved rounds "
          f"(load {os.getloadavg()[0]:.1f})\n")
    print("| lines | xargs -P s | shoal run s | shoal run / xargs (speed) |")
    print("|---|---|---|---|")
    med = {k: statistics.median(v) for k, v in times.items()}
    for n in sizes:
        x, s = med[("xargs -P", n)], med[("shoal run", n)]
        print(f"| {n:,} | {x:.3f} | {s:.3f} | {x / s:.2f}x |")
    print()
    fits = {name: _fit([(n, med[(name, n)]) for n in sizes]) for name in tools}
    for name, (start, per) in fits.items():
        print(f"{name}: start {start * 1000:.0f} ms, {per * 1e6:.0f} us a command "
              f"({1 / per:,.0f} commands/s)")
    (sx, px), (ss, ps) = fits["xargs -P"], fits["shoal run"]
    if ps < px:
        print(f"shoal run finishes first from ~{(ss - sx) / (px - ps):,.0f} lines")
    else:
        print("shoal run's pace is not ahead of xargs': no crossover")
    return 0


if __name__ == "__main__":
    sys.exit(main())
