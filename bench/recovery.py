"""Recovery benchmark (issue 10): time from kill -9 of an agent to its tasks running elsewhere.

    python bench/recovery.py                        # default timeout and --heartbeat-timeout 2, 3 reps
    python bench/recovery.py --timeouts 2,4 --reps 5 --json bench/results/recovery.json

One head (``python -m shoal.head``), agent A with 2 slots running 2 long tasks, agent B with
2 idle warm slots. At t0 agent A and its workers are killed at once (kill -9 of the whole
process tree: a node lost). Recovery = the moment the last of A's 2 tasks starts again on
B, minus t0 (each task appends "id agent-pid time.time()" when it starts). Goal: at most
the heartbeat timeout + 1 s. Run it with the project's venv (it uses shoal).
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from shoal.transport.connfile import Connection  # noqa: E402

PY = sys.executable
DEFAULT_TIMEOUT = 8.0  # the head's default --heartbeat-timeout


def hold(i: int, ledger: str, t: float = 60.0) -> int:
    """Announce the start ("i agent-pid time"), then hold the slot for ``t`` s."""
    import os
    import time

    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{i} {os.getppid()} {time.time():.6f}\n".encode())
    os.close(fd)
    time.sleep(t)
    return i


def _tree(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    out, todo = [pid], [pid]
    while todo:
        for k in kids.get(todo.pop(), ()):
            out.append(k)
            todo.append(k)
    return out


def _kill_tree(pid: int) -> None:
    pids = _tree(pid)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass


def _rows(ledger: str) -> list[tuple[int, int, float]]:
    try:
        with open(ledger) as fh:
            return [(int(a), int(b), float(c)) for a, b, c in (ln.split() for ln in fh if ln.strip())]
    except FileNotFoundError:
        return []


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.01)
    raise RuntimeError(f"timed out waiting for {what}")


def one(timeout: float | None, tasks: int = 2) -> dict:
    from shoal import Executor

    tmp = tempfile.mkdtemp(prefix="shoal-recovery-")
    conn = Connection.new(f"ipc://{tmp}/head")
    cf = os.path.join(tmp, "connection.json")
    conn.write(cf)
    ledger = os.path.join(tmp, "starts.txt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    common = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "log"), "ab"),
                  start_new_session=True, env=env)
    head_argv = [PY, "-m", "shoal.head", "--connection", cf, "--quiet"]
    if timeout is not None:
        head_argv += ["--heartbeat-timeout", str(timeout)]
    procs = [subprocess.Popen(head_argv, **common)]

    def agent(name: str) -> subprocess.Popen:
        p = subprocess.Popen([PY, "-m", "shoal.agent", "--connection", cf, "--slots", str(tasks),
                              "--name", name, "--quiet"], **common)
        procs.append(p)
        return p

    ex = None
    try:
        a = agent("agent-a")
        ex = Executor(connect=cf)
        _wait(lambda: len(ex.agents()) == 1, 60, "agent a")
        futs = [ex.submit(hold, i, ledger) for i in range(tasks)]
        _wait(lambda: len(_rows(ledger)) == tasks, 60, "the tasks to start on agent a")
        b = agent("agent-b")
        _wait(lambda: len(ex.agents()) == 2, 60, "agent b")
        time.sleep(1.0)  # b's workers warm
        t0 = time.time()
        _kill_tree(a.pid)
        a.wait()
        again = _wait(lambda: [r for r in _rows(ledger) if r[1] == b.pid]
                      if len([r for r in _rows(ledger) if r[1] == b.pid]) == tasks else None,
                      (timeout or DEFAULT_TIMEOUT) + 60, "the tasks to run again on agent b")
        starts = sorted(r[2] - t0 for r in again)
        for f in futs:
            f.cancel()
        return {"timeout": timeout or DEFAULT_TIMEOUT, "first": starts[0], "last": starts[-1]}
    finally:
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=True)
            ex._terminate()
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                _kill_tree(p.pid)
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timeouts", default="default,2",
                    help="comma-separated --heartbeat-timeout values; 'default' passes none (8 s)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", metavar="PATH", help="also write the measurements here")
    args = ap.parse_args(argv)
    settings = [None if t == "default" else float(t) for t in args.timeouts.split(",")]
    rows = []
    for timeout in settings:
        label = "default" if timeout is None else f"{timeout:g}"
        times = []
        for rep in range(args.reps):
            r = one(timeout)
            times.append(r["last"])
            print(f"timeout {label}: rep {rep + 1}: tasks running again after "
                  f"{r['first']:.2f} / {r['last']:.2f} s (first / last)", flush=True)
        t = timeout or DEFAULT_TIMEOUT
        rows.append({"setting": label, "timeout": t, "reps": args.reps, "min": min(times),
                     "median": statistics.median(times), "max": max(times), "goal": t + 1.0,
                     "met": max(times) <= t + 1.0, "times": times})
    print()
    print("| --heartbeat-timeout | timeout s | reps | min s | median s | max s | goal s | met |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['timeout']:g} | {r['reps']} | {r['min']:.2f} | {r['median']:.2f} "
              f"| {r['max']:.2f} | <= {r['goal']:g} | {'yes' if r['met'] else 'NO'} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"recovery": rows, "load": os.getloadavg()}, fh, indent=1)
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
