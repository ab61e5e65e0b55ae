"""Trace on vs off, in the same run: W1 (no-op Python tasks, one submit each) and W2
(``/bin/true`` commands on 2 slots).

    PYTHONPATH=. python bench/trace_bench.py [--w1 100000] [--w2 2000] [--reps 3]

Each repetition runs every cell once, off and on alternating (so load on a shared machine
falls on both alike); the table shows the median. The runtime is the local default's (a
head and one agent of 2 slots, the head with ``--exit-when-idle``, both watching this
process), started here the way ``shoal.launch.local`` starts it, with ``--trace FILE`` on
the head for "on"; "off" is the head without the flag, i.e. what every run pays today.

Besides wall time it reports the CPU the head, the agent, its workers and the client
spent per task (robust on a shared machine), and the trace's size. Goal: at most 10% slower
with the trace on (issue 11 item 5), then under 5% (issue 14). Results: docs/benchmarks.md
("Issue 14: report and trace cost") and docs/trace.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

# the same cells, timed the same way as the journal's cost (this directory is on sys.path)
from journal_bench import inc, w1, w2  # noqa: E402,F401

from shoal import Command, Executor
from shoal.transport.connfile import Connection


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` and its reaped children used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s(pid: int) -> float:
    """CPU seconds of the live children of ``pid`` (an agent's workers)."""
    total = 0.0
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            kids = [int(k) for k in fh.read().split()]
    except OSError:
        kids = []
    for k in kids:
        try:
            total += cpu_s(k)
        except OSError:
            pass
    return total


@contextmanager
def runtime(trace: str | None, workers: int, slots: int) -> Iterator[tuple[Executor, int, int]]:
    """Head + agent as the local default starts them; (executor, head pid, agent pid)."""
    rundir = tempfile.mkdtemp(prefix="stb")
    conn = Connection.new(f"ipc://{rundir}/head")
    connfile = os.path.join(rundir, "connection.json")
    conn.write(connfile)
    me, py = str(os.getpid()), sys.executable
    path = json.dumps([p for p in sys.path if p and os.path.isdir(p)] or [os.getcwd()])
    common = dict(start_new_session=True, close_fds=True, stdin=subprocess.DEVNULL)
    head = subprocess.Popen([py, "-m", "shoal.head", "--connection", connfile, "--owner-pid", me,
                             "--prefetch", "1", "--exit-when-idle", "--quiet",
                             *(["--trace", trace] if trace else [])], **common)
    agent = subprocess.Popen([py, "-m", "shoal.agent", "--connection", connfile, "--owner-pid",
                              me, "--slots", str(slots), "--workers", str(workers), "--sys-path",
                              path, "--quiet"], **common)
    try:
        with Executor(connect=connfile) as ex:
            yield ex, head.pid, agent.pid
        for p in (head, agent):
            p.wait(30)
    finally:
        for p in (head, agent):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        shutil.rmtree(rundir, ignore_errors=True)


def cell(name: str, n: int, trace: bool) -> tuple[float, int, float, float, float, float]:
    """One timed run: (seconds, trace bytes, head, agent, its workers' and the client's CPU
    us per task)."""
    workdir = tempfile.mkdtemp(prefix="stb")
    try:
        path = os.path.join(workdir, "run.trace") if trace else None
        workers, slots = (2, 2) if name == "W1" else (0, 2)
        with runtime(path, workers, slots) as (ex, head_pid, agent_pid):
            ex.submit(Command(["/bin/true"])).result()  # the agent is there
            h0, a0, k0 = cpu_s(head_pid), cpu_s(agent_pid), children_cpu_s(agent_pid)
            c0 = time.process_time()
            dt = (w1 if name == "W1" else w2)(ex, n)
            h, a = cpu_s(head_pid) - h0, cpu_s(agent_pid) - a0
            k, c = children_cpu_s(agent_pid) - k0, time.process_time() - c0
        size = os.path.getsize(path) if path and os.path.exists(path) else 0
        if trace:
            from shoal.trace import summary

            s = summary(path)
            assert s["tasks"] >= n, f"trace has {s['tasks']} tasks, not {n}"
        return dt, size, h / n * 1e6, a / n * 1e6, k / n * 1e6, c / n * 1e6
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _us(x: float) -> str:
    """A CPU figure in us per task, to 3 digits (W2's are in the thousands)."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--w1", type=int, default=100_000, help="W1 tasks (default 100000)")
    ap.add_argument("--w2", type=int, default=2_000, help="W2 commands (default 2000)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", choices=("W1", "W2"), help="run one workload")
    ap.add_argument("--off-only", action="store_true",
                    help="run only the cells without a trace, and print their times (to compare "
                         "two checkouts: trace off against a shoal without the trace code)")
    args = ap.parse_args()
    if args.off_only:
        for name, n in (("W1", args.w1), ("W2", args.w2)):
            if args.only in (None, name):
                for _ in range(args.reps):
                    dt, _, h, a, k, c = cell(name, n, False)
                    print(f"{name} off {dt:.3f} s head {h:.2f} agent {a:.2f} workers {k:.2f} "
                          f"client {c:.2f} us/task", flush=True)
        return 0
    cells = [(k, n) for k, n in (("W1", args.w1), ("W2", args.w2)) if args.only in (None, k)]
    times: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    sizes: dict[str, int] = {}
    for rep in range(args.reps):
        for name, n in cells:
            for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                dt, size, h, a, k, c = cell(name, n, mode == "on")
                times.setdefault((name, mode), []).append(dt)
                cpus.setdefault((name, mode), []).append((h, a, k, c))
                if mode == "on":
                    sizes[name] = size
                print(f"rep {rep + 1} {name} trace {mode}: {dt:.2f} s ({n / dt:.0f}/s), us/task "
                      f"head {h:.2f} agent {a:.2f} workers {k:.2f} client {c:.2f}",
                      file=sys.stderr, flush=True)

    print(f"\ntrace bench (median of {args.reps}; {os.cpu_count()} cores; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    print(f"{'cell':<14}{'off s':>7}{'on s':>7}{'slower':>8}{'pairs':>8}{'CPU':>7}"
          f"{'tasks/s on':>11}{'trace':>9}{'head':>12}{'agent':>12}{'workers':>12}"
          f"{'client':>12}{'trace us':>10}")  # CPU us per task
    for name, n in cells:
        off = statistics.median(times[(name, "off")])
        on = statistics.median(times[(name, "on")])
        pairs = statistics.median(b / a - 1 for a, b in zip(times[(name, "off")],
                                                            times[(name, "on")], strict=True))
        m_off = [statistics.median(x) for x in zip(*cpus[(name, "off")], strict=True)]
        m_on = [statistics.median(x) for x in zip(*cpus[(name, "on")], strict=True)]
        cpu = sum(m_on) / sum(m_off) - 1
        pair = [f"{_us(x)}/{_us(y)}" for x, y in zip(m_off, m_on, strict=True)]
        print(f"{f'{name} ({n})':<14}{off:>7.2f}{on:>7.2f}{(on / off - 1) * 100:>7.1f}%"
              f"{pairs * 100:>7.1f}%{cpu * 100:>6.1f}%"
              f"{n / on:>11.0f}{sizes[name] / 1e6:>6.1f} MB"
              + "".join(f"{p:>12}" for p in pair) + f"{sum(m_on) - sum(m_off):>10.2f}")
    print("(slower: of the median times; pairs: the median of each repetition's on/off; CPU:\n"
          " head + agent + workers + client CPU per task, on over off, the figure least moved\n"
          " by other work on a shared machine; head ... client: CPU us per task, off/on;\n"
          " trace us: what the trace adds per task, all processes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
