"""Journal on vs off, in the same run: W1 (no-op Python tasks, one submit each) and W2
(``/bin/true`` commands on 2 slots), then a resumed W1 answered from the journal.

    PYTHONPATH=. python bench/journal_bench.py [--w1 100000] [--w2 5000] [--reps 3]

Each repetition runs every cell once, off and on alternating (so load on a shared machine
falls on both alike); the table shows the median. "on" means what a user with a journal
pays: every task carries a journal key computed by the client's rule (qualified name, hash
of the pickled arguments, submission count) and the head writes the journal.

Besides wall time it reports the CPU the head and the client spent per task (robust on
a shared machine). Goal (issue 10): at most 10% slower with the journal.
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from shoal import Command, Executor
from shoal.head.journal import Journal


def inc(x: int) -> int:
    return x + 1


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def executor(journal: str | None, workers: int, slots: int) -> Iterator[tuple[Executor, int]]:
    """The local default (head + one agent), with or without a journal; and the head's pid."""
    with Executor(workers=workers, slots=slots, journal=journal) as ex:  # type: ignore[call-arg]
        yield ex, ex._cluster.head.pid  # type: ignore[attr-defined]


def w1(ex: Executor, n: int) -> float:
    ex.submit(inc, -1).result()  # warm: the function is on the agent, workers are up
    t0 = time.perf_counter()
    futures = [ex.submit(inc, i) for i in range(n)]
    results = [f.result() for f in futures]
    dt = time.perf_counter() - t0
    assert results == list(range(1, n + 1))
    return dt


def w2(ex: Executor, n: int) -> float:
    ex.submit(Command(["/bin/true"])).result()
    t0 = time.perf_counter()
    futures = [ex.submit(Command(["/bin/true"])) for _ in range(n)]
    codes = [f.result().returncode for f in futures]
    dt = time.perf_counter() - t0
    assert codes == [0] * n
    return dt


def cell(name: str, n: int, journal: bool,
         keep: str | None = None) -> tuple[float, int, float, float]:
    """One timed run: (seconds, journal bytes, head and client CPU microseconds per task)."""
    workdir = tempfile.mkdtemp(prefix="sjb")
    try:
        db = keep or (os.path.join(workdir, "run.db") if journal else None)
        workers, slots = (2, 2) if name == "W1" else (0, 2)
        with executor(db, workers, slots) as (ex, head_pid):
            head0, client0 = cpu_s(head_pid), time.process_time()
            dt = (w1 if name == "W1" else w2)(ex, n)
            head_cpu, client_cpu = cpu_s(head_pid) - head0, time.process_time() - client0
        size = sum(os.path.getsize(p) for p in (db, f"{db}-wal") if db and os.path.exists(p))
        return dt, size, head_cpu / n * 1e6, client_cpu / n * 1e6
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--w1", type=int, default=100_000, help="W1 tasks (default 100000)")
    ap.add_argument("--w2", type=int, default=5_000, help="W2 commands (default 5000)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if "journal" not in inspect.signature(Executor).parameters:
        print("journal_bench: this shoal's Executor has no journal= (the client's part)",
              file=sys.stderr)
        return 2
    times: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[tuple[float, float]]] = {}
    sizes: dict[str, int] = {}
    for rep in range(args.reps):
        for name, n in (("W1", args.w1), ("W2", args.w2)):
            for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                dt, size, head_us, client_us = cell(name, n, mode == "on")
                times.setdefault((name, mode), []).append(dt)
                cpus.setdefault((name, mode), []).append((head_us, client_us))
                if mode == "on":
                    sizes[name] = size
                print(f"rep {rep + 1} {name} journal {mode}: {dt:.2f} s", file=sys.stderr, flush=True)

    # resume: the same W1 again on a journal that holds all of it
    workdir = tempfile.mkdtemp(prefix="sjb")
    try:
        db = os.path.join(workdir, "keep.db")
        first = cell("W1", args.w1, True, keep=db)[0]
        t0 = time.perf_counter()
        Journal(db).close()  # opening builds the lookup index of earlier results
        index_s = time.perf_counter() - t0
        resumed = cell("W1", args.w1, True, keep=db)[0]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\njournal bench (median of {args.reps}; {os.cpu_count()} cores)")
    print(f"{'cell':<22}{'off s':>7}{'on s':>7}{'slower':>8}{'tasks/s on':>11}{'journal':>10}"
          f"{'head us/task off/on':>21}{'client us/task off/on':>23}")
    for name, n in (("W1", args.w1), ("W2", args.w2)):
        off = statistics.median(times[(name, "off")])
        on = statistics.median(times[(name, "on")])
        h_off, c_off = (statistics.median(x) for x in zip(*cpus[(name, "off")], strict=True))
        h_on, c_on = (statistics.median(x) for x in zip(*cpus[(name, "on")], strict=True))
        print(f"{f'{name} ({n} tasks)':<22}{off:>7.2f}{on:>7.2f}{(on / off - 1) * 100:>7.1f}%"
              f"{n / on:>11.0f}{sizes[name] / 1e6:>7.1f} MB"
              f"{f'{h_off:.1f} / {h_on:.1f}':>21}{f'{c_off:.1f} / {c_on:.1f}':>23}")
    print(f"W1 resumed from the journal: {resumed:.2f} s for {args.w1} tasks "
          f"(first run {first:.2f} s; opening the journal and indexing {args.w1} results "
          f"{index_s:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
