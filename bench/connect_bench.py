"""What `shoal serve --connect` costs: a job's commands on a runtime's agents, each in its own
sandbox there, against the same job run whole in the local sandbox.

Times, alternating, on fresh copies of the inputs each run (uploaded into the job's ``work``):

* ``local``: ``shoal.service.sandbox.run_job`` (runner and a local shoal runtime in one
  sandbox, ``Limits(workers=2)``);
* ``connect``: ``shoal.service.connect.run_job_connected`` on a real ``shoal head`` with two
  ``shoal agent`` processes of one slot each on this machine (``Limits(workers=2)``): the
  runner in the sandbox here, each command (a cluster's chain) in a per-command sandbox
  started by a warm worker of an agent (``shoal.service.sandbox_cmd.task_run``);
* ``wrapper``: one ``task_run(["/bin/true"])`` through the runtime (a command's fixed cost:
  the round trip to a warm worker of an agent, the sandbox's start and end).

The workflow is bench/script/ipcc_like.sh (119 NCO commands) over 19 synthetic models of the
small size (tas(120, 64, 128), 3.9 MB each); the results must be equal (ncdump, history/NCO
attributes ignored). Prints medians. Needs root, bubblewrap and NCO.

    python bench/connect_bench.py [--repeat 3] [--models 19]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench" / "script"))
sys.path.insert(0, str(REPO))

from bench_nco import generate  # noqa: E402

from shoal import Executor  # noqa: E402
from shoal.service.connect import run_job_connected  # noqa: E402
from shoal.service.sandbox import Limits, check, run_job  # noqa: E402
from shoal.service.sandbox_cmd import task_run  # noqa: E402
from tests.script.script_helpers import ncdump_normal  # noqa: E402

SCRIPT = REPO / "bench" / "script" / "ipcc_like.sh"


def start_runtime(root: Path) -> tuple[str, list[subprocess.Popen]]:
    conn = root / "run.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    head = subprocess.Popen([sys.executable, "-m", "shoal", "head", "--bind",
                             "tcp://127.0.0.1:0", "--connection-file", str(conn)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [head]
    deadline = time.monotonic() + 30
    while not conn.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    for name in ("a1", "a2"):
        procs.append(subprocess.Popen([sys.executable, "-m", "shoal", "agent", "--connect",
                                       str(conn), "--slots", "1", "--name", name], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    with Executor(connect=str(conn)) as ex:
        ex.wait_for_agents(2, timeout=30)
    return str(conn), procs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", type=int, default=19)
    a = ap.parse_args()
    problems = check()
    if problems:
        sys.exit("connect_bench: " + "; ".join(problems))
    root = Path(tempfile.mkdtemp(prefix="shoal-connect-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        conn, procs = start_runtime(root)
        inputs = root / "inputs"
        generate(str(inputs), a.models, 120, 64, 128)
        (inputs / "skel.nc").unlink(missing_ok=True)
        data = root / "data"
        data.mkdir()
        lim = Limits(workers=2)
        times: dict[str, list[float]] = {"local": [], "connect": [], "wrapper": []}
        outs: dict[str, Path] = {}
        commands = ""
        for i in range(a.repeat):
            for kind in times:
                d = root / "jobs" / f"{kind}{i}"
                work = d / "work"
                if kind == "wrapper":
                    work.mkdir(parents=True)
                else:
                    shutil.copytree(inputs, work)
                t0 = time.perf_counter()
                if kind == "local":
                    res = run_job(SCRIPT, [], job_dir=d, data_dir=data, limits=lim,
                                  log=d / "log")
                    ok = res.returncode == 0 and res.reason is None
                elif kind == "connect":
                    res = run_job_connected(SCRIPT, [], job_dir=d, data_dir=data, limits=lim,
                                            log=d / "log", connect=conn)
                    ok = res.returncode == 0 and res.reason is None
                    m = re.search(r"connect: (\d+) command\(s\) ran on (\d+) agent",
                                  (d / "log").read_text())
                    commands = f"{m.group(1)} commands on {m.group(2)} agents" if m else "?"
                else:
                    with Executor(connect=conn) as ex:
                        ex.submit(int).result(60)  # the workers this client gets are warm
                        t0 = time.perf_counter()
                        r = ex.submit(task_run, ["/bin/true"], str(d), str(data),
                                      asdict(lim), "bench").result(60)
                    ok = r["exit"] == 0
                times[kind].append(time.perf_counter() - t0)
                if not ok:
                    sys.exit(f"connect_bench: {kind} run {i} failed: see {d / 'log'}")
                outs[kind] = work
        for name in ("biases.nc", "ens_anmfld.nc"):
            if ncdump_normal(outs["local"] / name) != ncdump_normal(outs["connect"] / name):
                sys.exit(f"connect_bench: {name} differs between the runs")
        load = os.getloadavg()[0]
        m = statistics.median
        for kind, label in (("local", "run_job (local sandbox, workers=2)"),
                            ("connect", "run_job_connected (2 agents x 1 slot)"),
                            ("wrapper", "one task_run(/bin/true) via an agent")):
            v = times[kind]
            print(f"{label:42s} median {m(v):6.2f} s   runs " + " ".join(f"{x:.2f}" for x in v))
        print(f"connect / local: {m(times['connect']) / m(times['local']):.2f}x ({a.models} "
              f"models, {commands}, load average {load:.1f}; results equal)")
    finally:
        for p in procs[::-1]:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
