#!/usr/bin/env python3
"""Benchmark shoal against its peers: one command, each peer in its own virtualenv and fresh process.

    python bench/run.py                                  # everything, 3 repetitions
    python bench/run.py --workloads W1,W5 --peers shoal,pool --reps 1
    python bench/run.py --scale 0.05 --nice 19           # smoke run on a busy machine

Workloads: W1 (submit per task), W1map, W2, W3 (= W3-100 and W3-400), W4, W5.  See README.md.
Results: bench/results/<run-id>.json (+ latest.json), per-cell logs in bench/results/raw/<run-id>/,
and the generated tables in docs/benchmarks.md (between the bench:begin/end markers).

Standard library only; run it with any Python >= 3.10 (the project venv is fine).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import platform
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import common  # noqa: E402
import report  # noqa: E402

ENVS = os.path.join(HERE, ".envs")
RESULTS = os.path.join(HERE, "results")
PROJECT_PY = os.path.join(ROOT, ".venv", "bin", "python")

ALL_WORKLOADS = ["W1", "W1map", "W2", "W3-100", "W3-400", "W4", "W5"]
PY_GROUP = ["W5", "W1", "W1map", "W2", "W4"]  # run in one fresh process per (peer, rep)
W3_SHAPES = {"W3-100": (1000, 100), "W3-400": (4000, 400)}


SHOAL_PY = "shoal"  # peer_python: the interpreter of shoal's peers (installed_python)
INSTALLED = os.path.join(ENVS, "shoal-installed")
DEV_VENV = False  # --dev-venv: shoal's peers run the project venv's interpreter itself


def installed_python():
    """The interpreter shoal's peers run: shoal as a user's regular install has it.

    The project venv installs shoal *editable*, and setuptools' editable finder, which its
    ``.pth`` file imports at every interpreter start, costs ~10 ms (pathlib, urllib.parse,
    importlib.util: nothing shoal imports) that a wheel install, and the standard-library
    peers on the plain interpreter, do not pay. So the peers get a venv of their own, made
    once here: shoal's dependencies by a path entry to the project venv's site-packages (its
    ``.pth`` files, the finder's among them, are not run from there), the tree under test on
    PYTHONPATH as before, and a ``shoal`` script as pip writes one. ``--dev-venv`` times the
    project venv instead."""
    if DEV_VENV:
        return PROJECT_PY
    py = os.path.join(INSTALLED, "bin", "python")
    site = subprocess.run([PROJECT_PY, "-c", "import zmq, os; print(os.path.dirname("
                           "os.path.dirname(zmq.__file__)))"],
                          capture_output=True, text=True).stdout.strip()
    pth = os.path.join(INSTALLED, "lib", "python{}.{}".format(*sys.version_info[:2]),
                       "site-packages", "shoal-deps.pth")
    if not site:
        return PROJECT_PY  # no project venv: availability() says so
    try:
        with open(pth) as fh:
            if fh.read().strip() == site and os.path.exists(py):
                return py
    except OSError:
        pass
    base = subprocess.run([PROJECT_PY, "-c", "import sys; print(sys._base_executable)"],
                          capture_output=True, text=True).stdout.strip()
    subprocess.run([base, "-m", "venv", "--clear", "--without-pip", INSTALLED], check=True)
    pth = os.path.join(subprocess.run([py, "-c", "import sysconfig; print(sysconfig."
                                       "get_path('purelib'))"], capture_output=True,
                                      text=True, check=True).stdout.strip(), "shoal-deps.pth")
    with open(pth, "w") as fh:
        fh.write(site + "\n")
    script = os.path.join(INSTALLED, "bin", "shoal")
    with open(script, "w") as fh:  # what pip writes for [project.scripts]
        fh.write(f"#!{py}\nimport sys\nfrom shoal.cli.main import main\n"
                 "if __name__ == '__main__':\n    sys.exit(main())\n")
    os.chmod(script, 0o755)
    return py


def base_python():
    """The plain interpreter (no venv) for the stdlib pools and the CLI harnesses."""
    exe = getattr(sys, "_base_executable", None) or sys.executable
    if sys.prefix != sys.base_prefix:
        cand = os.path.join(sys.base_prefix, "bin", "python3")
        if os.path.exists(cand):
            exe = cand
    return exe


def hq_binary():
    b = os.environ.get("HQ_BIN") or shutil.which("hq")
    return b if b and os.access(b, os.X_OK) else None


# name -> how to run it.  n_scale: W1/W2 task counts relative to the spec (the slow peers run
# 2,000 and 200 tasks by default: their per-task cost is flat, and at full size they alone would
# take 10 minutes; --full-size runs everyone at full size).  w3_max: widest W3 run by default
# (--wide-all lifts it).  heavy: W3 starts 100 worker processes (30-60 s before the timed window),
# so it runs --heavy-reps times (default 1) rather than --reps.
PEERS = {
    "shoal": dict(script="shoal_bench.py", env=None, python=SHOAL_PY),
    # shoal's CLI, timed like xargs: whole `shoal run` wall time, head/agent start included
    "shoal-cli": dict(
        script="cmdline_bench.py", env=None, python=SHOAL_PY, args=["--tool", "shoal"]
    ),
    # the same two on another tree (--base DIR, e.g. a `git worktree` of main): A/B in one run
    "shoal-base": dict(script="shoal_bench.py", env=None, python=SHOAL_PY, base=True),
    "shoal-cli-base": dict(
        script="cmdline_bench.py", env=None, python=SHOAL_PY, args=["--tool", "shoal"],
        base=True,
    ),
    "pool": dict(script="stdlib_pool_bench.py", env=None),
    "futures": dict(script="stdlib_futures_bench.py", env=None),
    "dask": dict(script="dask_bench.py", env="dask", n_scale=0.1),
    "ray": dict(script="ray_bench.py", env="ray", n_scale=0.1, w3_max=100, heavy=True),
    "parsl": dict(script="parsl_bench.py", env="parsl", n_scale=0.1, w3_max=100, heavy=True),
    "ipyparallel": dict(
        script="ipyparallel_bench.py", env="ipyparallel", n_scale=0.1, w3_max=100, heavy=True
    ),
    "hq": dict(script="hq_bench.py", env=None, needs="hq"),
    "xargs": dict(script="cmdline_bench.py", env=None, args=["--tool", "xargs"], needs="xargs"),
    "parallel": dict(
        script="cmdline_bench.py", env=None, args=["--tool", "parallel"], needs="parallel"
    ),
}


def peer_python(name):
    spec = PEERS[name]
    if spec.get("python") == SHOAL_PY:
        return installed_python()
    if spec.get("python"):
        return spec["python"]
    if spec["env"]:
        return os.path.join(ENVS, spec["env"], "bin", "python")
    return base_python()


BASE_TREE = None  # --base: the tree the *-base peers import shoal from


def shoal_tree(name):
    """The source tree a shoal peer imports (this checkout, or --base), else None."""
    if name in ("shoal", "shoal-cli"):
        return ROOT
    if PEERS[name].get("base"):
        return BASE_TREE
    return None


def availability(name):
    """None if the peer can run here, else the reason it cannot."""
    spec = PEERS[name]
    if spec.get("base") and not BASE_TREE:
        return "not available: no --base tree"
    py = peer_python(name)
    if not os.path.exists(py):
        if spec["env"]:
            return f"not available: no {py} (run bench/setup_peers.sh)"
        return f"not available: no {py}"
    if name.startswith("shoal-cli") and not os.path.exists(os.path.join(ROOT, ".venv", "bin", "shoal")):
        return "not available: no .venv/bin/shoal"
    if name in ("shoal", "shoal-base"):
        # An installed package has its bytecode compiled (pip does it); the editable
        # checkout may not (PYTHONDONTWRITEBYTECODE), which would time the compiler.
        tree = shoal_tree(name)
        subprocess.run([py, "-m", "compileall", "-q", os.path.join(tree, "shoal"), HERE],
                       capture_output=True)
        p = subprocess.run(
            [py, "-c", "from shoal import Executor, Command"], capture_output=True, text=True,
            env=dict(os.environ, PYTHONPATH=tree),
        )
        if p.returncode != 0:
            return "not available: " + (p.stderr.strip().splitlines() or ["import failed"])[-1]
    need = spec.get("needs")
    if need == "hq" and not hq_binary():
        return "not available: no hq binary ($HQ_BIN or PATH)"
    if need in ("xargs", "parallel") and not shutil.which(need):
        return f"not available: no {need} on PATH"
    return None


# --------------------------------------------------------------------------------------------
# process hygiene: we are a child subreaper, so anything a runner leaves behind (Ray's raylet,
# Dask's nanny, ipengines, hq server/worker) is re-parented to us and killed here by PID.

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:
        pass


def _proc_table():
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
            rest = s[s.rindex(")") + 2 :].split()
            table[int(d)] = int(rest[1])  # ppid
        except (OSError, ValueError, IndexError):
            pass
    return table


def descendants(root):
    table = _proc_table()
    kids = {}
    for pid, ppid in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, stack = [], list(kids.get(root, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(kids.get(p, []))
    return out


def reap_all():
    """Kill every process below us (what the finished cell left behind) and reap it."""
    me = os.getpid()
    for sig, pause in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 0.5)):
        pids = descendants(me)
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + pause
        while time.time() < deadline and descendants(me):
            _waitall()
            time.sleep(0.05)
    _waitall()
    left = descendants(me)
    return left


def _waitall():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# --------------------------------------------------------------------------------------------
# one cell = one fresh runner process


class Cell:
    """One fresh runner process: a peer, a repetition, the workloads it measures."""

    def __init__(self, peer, rep, workloads, label, **params):
        self.peer, self.rep, self.workloads, self.label, self.params = (
            peer,
            rep,
            list(workloads),
            label,
            params,
        )

    def argv(self):
        wl = ["W3" if w.startswith("W3") else w for w in self.workloads]
        out = ["--workloads", ",".join(wl)]
        for k, v in self.params.items():
            out += ["--" + k, str(v)]
        return out


def run_cell(cell, args, rawdir):
    """Run one runner process; return the list of sample records."""
    spec = PEERS[cell.peer]
    workdir = os.path.join(rawdir, cell.label)
    os.makedirs(workdir, exist_ok=True)
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    # shoal peers import the tree under test first (not whatever the venv has installed)
    tree = shoal_tree(cell.peer)
    env["PYTHONPATH"] = HERE if tree is None else tree + os.pathsep + HERE
    env["BENCH_WORKDIR"] = workdir
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    if spec["env"]:
        env["PATH"] = os.path.join(ENVS, spec["env"], "bin") + os.pathsep + env.get("PATH", "")
    elif tree is not None:
        env["PATH"] = (os.path.dirname(peer_python(cell.peer)) + os.pathsep
                       + env.get("PATH", ""))  # its `shoal` script
    if cell.peer == "hq":
        env["HQ_BIN"] = hq_binary()
    cmd = [peer_python(cell.peer), os.path.join(HERE, "peers", spec["script"])]
    cmd += spec.get("args", []) + cell.argv() + ["--workdir", workdir]
    if args.nice:
        cmd = ["nice", "-n", str(args.nice)] + cmd
    log = open(os.path.join(rawdir, cell.label + ".log"), "w")
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    t_launch = time.time()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
        cwd=workdir,
        start_new_session=True,
    )
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    samples, info = [], {}
    pending = [w for w in cell.workloads]
    limit = args.startup_timeout
    deadline = time.time() + limit
    failure = None
    ready = False
    while True:
        try:
            line = lines.get(timeout=max(0.05, deadline - time.time()))
        except queue.Empty:
            failure = f"timeout (> {limit:g} s)"
            break
        if line is None:
            break
        log.write(line)
        log.flush()
        if not line.startswith(common.MARK):
            continue
        rec = json.loads(line[len(common.MARK) :])
        if rec.get("event") == "info":
            info = rec
            continue
        if rec.get("event") == "ready":
            ready = True
            limit = args.timeout
            deadline = time.time() + limit
            continue
        w = rec.get("workload")
        if w == "W3":
            w = "W3-{}".format(rec["slots"])
        rec["workload"] = w
        if w == "W5" and "t_first" in rec:
            t0 = rec.get("t_launch") or t_launch
            rec["seconds"] = rec["t_first"] - t0
        rec.update(peer=cell.peer, rep=cell.rep)
        samples.append(rec)
        if w in pending:
            pending.remove(w)
        deadline = time.time() + limit
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    rc = proc.wait()
    left = reap_all()
    if left:
        print(f"  warning: could not kill {left}", flush=True)
    if failure is None and rc != 0:
        failure = f"runner exited {rc} (see {cell.label}.log)"
    rest = []
    if pending and failure and failure.startswith("timeout") and ready:
        # the workload running when the clock ran out timed out; the ones after it were never
        # reached: they get a fresh process of their own (W5 excepted: no longer a cold start)
        samples.append(dict(workload=pending[0], peer=cell.peer, rep=cell.rep, error=failure))
        rest = [w for w in pending[1:] if w != "W5"]
        pending = [w for w in pending[1:] if w == "W5"]
    if pending:
        why = failure or f"no result (see {cell.label}.log)"
        for w in pending:
            samples.append(dict(workload=w, peer=cell.peer, rep=cell.rep, error=why))
    log.close()
    for s in samples:
        s.setdefault("version", info.get("version"))
    return samples, info, rest


# --------------------------------------------------------------------------------------------


def plan(args, peers, workloads):
    """The cells to run, and the (peer, workload, reason) of those deliberately left out."""
    cells, left_out = [], []
    scale = args.scale
    group = [w for w in PY_GROUP if w in workloads]
    for rep in range(1, args.reps + 1):
        for p in peers:
            if not group:
                continue
            f = 1.0 if args.full_size else PEERS[p].get("n_scale", 1.0)
            n1 = max(10, int(20000 * scale * f))
            n2 = max(10, int(2000 * scale * f))
            cells.append(Cell(p, rep, group, f"{p}-py-r{rep}", n1=n1, n2=n2, depth=args.depth))
    for w3 in ("W3-100", "W3-400"):
        if w3 not in workloads:
            continue
        ntasks, slots = W3_SHAPES[w3]
        if scale < 1.0:  # smoke: same width, fewer tasks, at least one full wave
            ntasks = max(slots, int(ntasks * scale))
        for rep in range(1, args.reps + 1):
            for p in peers:
                spec = PEERS[p]
                if slots > spec.get("w3_max", 10**9) and not args.wide_all:
                    if rep == 1:
                        left_out.append((p, w3, f"not run at {slots} slots (--wide-all runs it)"))
                    continue
                if spec.get("heavy") and rep > args.heavy_reps:
                    continue
                cells.append(Cell(p, rep, [w3], f"{p}-{w3}-r{rep}", ntasks=ntasks, slots=slots))
    return cells, left_out


def summarize(rec):
    w = rec["workload"]
    if rec.get("na"):
        return "n/a"
    if "error" in rec:
        return "ERROR " + rec["error"]
    if w in ("W1", "W1map", "W2"):
        return "{:.0f} tasks/s".format(rec["rate"])
    if w.startswith("W3"):
        return "{:.3f} s (+{:.2f}%)".format(rec["seconds"], 100 * rec["overhead"])
    return "{:.3f} s".format(rec["seconds"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workloads", default=",".join(["W1", "W1map", "W2", "W3", "W4", "W5"]))
    ap.add_argument("--peers", default=",".join(p for p in PEERS if not PEERS[p].get("base")))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="task counts x this (smoke runs)")
    ap.add_argument("--depth", type=int, default=10, help="W4 tree depth")
    ap.add_argument(
        "--full-size", action="store_true", help="no reduced W1/W2 counts for slow peers"
    )
    ap.add_argument("--wide-all", action="store_true", help="W3-400 also for Ray/Parsl/ipyparallel")
    ap.add_argument(
        "--heavy-reps",
        type=int,
        default=1,
        help="W3 repetitions for Ray/Parsl/ipyparallel (each starts 100 worker processes)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="s per workload before giving up (default 45, 180 with --full-size)",
    )
    ap.add_argument("--startup-timeout", type=float, default=240.0, help="s to runtime ready")
    ap.add_argument("--nice", type=int, default=0, help="run the runners under nice -n N")
    ap.add_argument("--docs", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    ap.add_argument(
        "--base",
        metavar="DIR",
        help="another shoal source tree (e.g. a worktree of main): peers shoal-base and "
        "shoal-cli-base run it, interleaved with shoal and shoal-cli (A/B in one run)",
    )
    ap.add_argument("--dev-venv", action="store_true",
                    help="shoal's peers run the project venv's interpreter (with its editable "
                    "finder) instead of one as a regular install has (installed_python)")
    args = ap.parse_args(argv)
    global BASE_TREE, DEV_VENV
    DEV_VENV = args.dev_venv
    if args.base:
        BASE_TREE = os.path.abspath(args.base)
        if not os.path.isdir(os.path.join(BASE_TREE, "shoal")):
            ap.error(f"--base {args.base}: no shoal/ package in it")
    if args.timeout is None:
        args.timeout = 180.0 if args.full_size else 45.0

    common.check_ideal()
    workloads = []
    for w in args.workloads.split(","):
        w = w.strip()
        if w == "W3":
            workloads += ["W3-100", "W3-400"]
        elif w in ALL_WORKLOADS:
            workloads.append(w)
        elif w:
            ap.error(
                "unknown workload {!r} (choose from {}, W3)".format(w, ", ".join(ALL_WORKLOADS))
            )
    workloads = sorted(set(workloads), key=ALL_WORKLOADS.index)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    for p in peers:
        if p not in PEERS:
            ap.error("unknown peer {!r} (choose from {})".format(p, ", ".join(PEERS)))
    if BASE_TREE:  # each shoal peer is followed by the same on the base tree
        for p in ("shoal", "shoal-cli"):
            if p in peers and p + "-base" not in peers:
                peers.insert(peers.index(p) + 1, p + "-base")

    # two runs at once on 2 cores would measure each other: take turns
    os.makedirs(os.path.join(RESULTS, "raw"), exist_ok=True)
    lock = open(os.path.join(RESULTS, "raw", ".lock"), "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        print(
            f"another bench/run.py is running ({lock.read().strip()}); waiting for it", flush=True
        )
        fcntl.flock(lock, fcntl.LOCK_EX)
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}, started {time.strftime('%H:%M:%S')}")
    lock.flush()

    become_subreaper()
    run_id = base_id = time.strftime("%Y%m%d-%H%M%S")
    k = 1
    while os.path.exists(os.path.join(RESULTS, "raw", run_id)):
        k += 1
        run_id = f"{base_id}-{k}"
    rawdir = os.path.join(RESULTS, "raw", run_id)
    os.makedirs(rawdir, exist_ok=True)

    unavailable = {}
    for p in list(peers):
        why = availability(p)
        if why:
            unavailable[p] = why
            print(f"{p:<12} {why}", flush=True)
    runnable = [p for p in peers if p not in unavailable]
    cells, left_out = plan(args, runnable, workloads)
    print(
        f"run {run_id}: {len(cells)} cells, peers {','.join(runnable)}, "
        f"workloads {','.join(workloads)}, reps {args.reps}, scale {args.scale:g}",
        flush=True,
    )
    result = dict(
        run_id=run_id,
        started=time.strftime("%Y-%m-%d %H:%M:%S"),
        machine=dict(
            cpus=os.cpu_count(),
            platform=platform.platform(),
            python=platform.python_version(),
            load_at_start=os.getloadavg(),
        ),
        args=vars(args),
        workloads=workloads,
        peers=peers,
        unavailable=unavailable,
        versions={},
        samples=[],
    )
    for p, w, why in left_out:
        result["samples"].append(dict(workload=w, peer=p, rep=0, skipped=why))
    t_start = time.time()
    timed_out = {}
    interrupted = False
    try:
        for i, cell in enumerate(cells, 1):
            t0 = time.time()
            # a workload that timed out once is not repeated (Ray's W4 would cost minutes)
            for w in [w for w in cell.workloads if (cell.peer, w) in timed_out]:
                cell.workloads.remove(w)
                why = "not repeated after " + timed_out[cell.peer, w]
                result["samples"].append(
                    dict(workload=w, peer=cell.peer, rep=cell.rep, skipped=why)
                )
            if not cell.workloads:
                continue
            print(
                f"[{i}/{len(cells)}] {cell.peer:<11} rep {cell.rep}  " + ",".join(cell.workloads),
                end="",
                flush=True,
            )
            samples, info, rest = run_cell(cell, args, rawdir)
            if rest:
                more = Cell(cell.peer, cell.rep, rest, cell.label + "-cont", **cell.params)
                cells.insert(i, more)
            if info.get("version"):
                result["versions"][cell.peer] = info["version"]
            result["samples"].extend(samples)
            for s in samples:
                # shoal is the system under test: its timeouts are retried in every repetition
                if cell.peer != "shoal" and str(s.get("error", "")).startswith("timeout"):
                    timed_out[cell.peer, s["workload"]] = f"{s['error']} in rep {cell.rep}"
            dt = time.time() - t0
            done = time.time() - t_start
            eta = done / i * (len(cells) - i)
            print(
                f"  ({dt:.1f} s, elapsed {_hms(done)}, ETA {_hms(eta)})",
                flush=True,
            )
            for s in samples:
                print("      {:<7} {}".format(s["workload"], summarize(s)), flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: cleaning up and writing what we have", flush=True)
        reap_all()
    result["elapsed_s"] = time.time() - t_start
    result["interrupted"] = interrupted
    result["machine"]["load_at_end"] = os.getloadavg()
    out = os.path.join(RESULTS, run_id + ".json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    shutil.copyfile(out, os.path.join(RESULTS, "latest.json"))
    print(f"results: {os.path.relpath(out)} (raw logs in {os.path.relpath(rawdir)})")
    md = report.render(result)
    print()
    print(report.render_summary(result))
    if not args.no_docs:
        report.write_docs(args.docs, md)
        print(f"tables written to {os.path.relpath(args.docs)}")
    return 1 if interrupted else 0


def _hms(s):
    s = int(s)
    return f"{s // 60}:{s % 60:02d}"


if __name__ == "__main__":
    sys.exit(main())
