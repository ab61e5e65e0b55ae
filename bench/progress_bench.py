"""What the live view costs: W1map with the progress line off, on and automatic, on a real
pseudo-terminal; and W1/W1map with this head (which keeps `shoal status`'s failure ring
and counters) against a copy of the code from before it.

    PYTHONPATH=. python bench/progress_bench.py [--n 20000] [--reps 15] [--chunksize 1]
    PYTHONPATH=. python bench/progress_bench.py --base /tmp/base [--n 20000] [--reps 15]

The cells are those of bench/run.py: ``list(ex.map(inc, range(n)))`` (W1map: default
chunking) and one submit per task (W1), on ``Executor(workers=2)``, after a warm-up. Each
repetition runs every variant once, in the same process, the order rotating (so load on a
shared machine falls on all alike); the table shows the median and the ratio to "off".
The child's stderr is a pseudo-terminal (so "auto" is what a user at a terminal gets; a
W1map of 20,000 no-op tasks ends before the 1.5 s after which "auto" draws, so "on" is
the case that draws); its output is drained here. ``--base DIR``: a directory holding a
``shoal`` package from before (e.g. ``git archive f33a4a5 shoal | tar -x -C DIR``): each
repetition runs a fresh process on each code, alternating, and compares W1 and W1map.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def inc(x):
    return x + 1


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of the process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def child(args: argparse.Namespace) -> None:
    from shoal import Executor

    variants = args.variants.split(",")
    with Executor(workers=2) as ex:
        head = ex._cluster.head.pid  # the local default's head process
        for _ in range(3):  # warm-up: workers started, functions sent
            list(ex.map(inc, range(2000)))
            [f.result() for f in [ex.submit(inc, i) for i in range(2000)]]
        for rep in range(args.reps):
            k = rep % len(variants)
            for v in variants[k:] + variants[:k]:
                t0, c0, h0 = time.perf_counter(), time.process_time(), cpu_s(head)
                if v == "W1":
                    res = [f.result() for f in [ex.submit(inc, i) for i in range(args.n)]]
                else:
                    setting = {"off": False, "on": True, "auto": None, "W1map": None}[v]
                    kw = {} if v == "W1map" else {"progress": setting}
                    if args.chunksize:
                        kw["chunksize"] = args.chunksize
                    res = list(ex.map(inc, range(args.n), **kw))
                secs, cpu = time.perf_counter() - t0, time.process_time() - c0
                assert res[-1] == args.n and len(res) == args.n
                time.sleep(0.05)  # the head's last turn of this cell is over
                print(json.dumps({"variant": v, "seconds": secs, "cpu": cpu,
                                  "head_cpu": cpu_s(head) - h0}), flush=True)


def run_child(pythonpath: str, variants: str, n: int, reps: int,
              chunksize: int | None = None) -> list[dict]:
    """One child process with its stderr on a new pseudo-terminal; its JSON lines."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": pythonpath}
    env.pop("SHOAL_PROGRESS", None)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", "--n", str(n),
                          "--reps", str(reps), "--variants", variants,
                          *(["--chunksize", str(chunksize)] if chunksize else [])],
                         stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                         env=env, text=True, cwd=HERE)
    os.close(slave)
    term = bytearray()

    def drain() -> None:  # what a terminal does: read everything, at once
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            term.extend(chunk)

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    out = [json.loads(line) for line in p.stdout if line.startswith("{")]
    p.wait()
    t.join(5)
    os.close(master)
    if p.returncode:
        sys.exit(f"child failed ({p.returncode}): {term[-2000:].decode(errors='replace')}")
    return out


def table(rows: dict[str, list[dict]], n: int, base: str) -> None:
    """Median wall time, client CPU (all its threads: the progress thread is one) and
    head CPU (its process; clock ticks of 10 ms, so only a large n resolves it)."""
    def med(v: str, key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows[v])

    ref, ref_cpu, ref_head = med(base, "seconds"), med(base, "cpu"), med(base, "head_cpu")
    print(f"| variant | median s | tasks/s | vs {base} | client CPU s | vs {base} | head CPU s "
          f"| vs {base} | reps |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for v, cells in rows.items():
        m, c, h = med(v, "seconds"), med(v, "cpu"), med(v, "head_cpu")
        print(f"| {v} | {m:.3f} | {n / m:,.0f} | {m / ref:.3f} | {c:.3f} | "
              f"{c / ref_cpu if ref_cpu else 0:.3f} | {h:.2f} | {h / ref_head if ref_head else 0:.3f} "
              f"| {len(cells)} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--base", help="a directory with the shoal package from before")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--variants", default="off,on,auto")
    ap.add_argument("--chunksize", type=int, default=None,
                    help="map chunk size (default: the map's own, as W1map; 1: a task per item)")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} n={args.n} reps={args.reps} "
          f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")
    if args.base is None:
        rows: dict[str, list[dict]] = {"off": [], "on": [], "auto": []}
        for r in run_child(ROOT, "off,on,auto", args.n, args.reps, args.chunksize):
            rows[r["variant"]].append(r)
        print(f"\nW1map (chunksize {args.chunksize or 'default'}), progress line off / on / "
              "automatic (stderr a pseudo-terminal)\n")
        table(rows, args.n, "off")
        return
    cells: dict[str, dict[str, list[dict]]] = {"W1": {}, "W1map": {}}
    for rep in range(args.reps):
        order = [("before", args.base), ("after", ROOT)]
        if rep % 2:
            order.reverse()
        for label, path in order:
            for r in run_child(path, "W1,W1map", args.n, 1, args.chunksize):
                cells[r["variant"]].setdefault(label, []).append(r)
    for cell, rows in cells.items():
        print(f"\n{cell}, head and client before / after (a fresh process each, alternating)\n")
        table({k: rows[k] for k in ("before", "after")}, args.n, "before")


if __name__ == "__main__":
    main()
