"""Wall time of N concurrent `python -c "import numpy"`, from the shared prefix and from the
node-local copy (rerouted), N = 1, 8, 32, 64.

    nice python bench/bundle/concurrent_import.py [--reps 3] [--ns 1,8,32,64]

Also reports the file syscalls that would reach the shared file system, N x per-process
(counted once with strace), which is the cost that grows with N on a real cluster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import bundles_of_this_venv, loadavg, local_dir, remove, save, unpack

from shoal.bundle import python_executable, rerouted_environ


def wave(cmd: list[str], env: dict, n: int, cwd: str) -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd, env=env, cwd=cwd) for _ in range(n)]
    rcs = [p.wait() for p in procs]
    dt = time.perf_counter() - t0
    if any(rcs):
        raise SystemExit(f"an import failed: {rcs}")
    return dt


def shared_syscalls(cmd: list[str], env: dict, shared: list[str], cwd: str) -> int:
    with tempfile.NamedTemporaryFile(prefix="shoal-strace-") as t:
        subprocess.run(
            ["strace", "-f", "-qq", "-e", "trace=%file", "-o", t.name, *cmd],
            env=env,
            cwd=cwd,
            check=True,
        )
        return sum(
            any(f'"{p}' in ln for p in shared) for ln in Path(t.name).read_text().splitlines()
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ns", default="1,8,32,64")
    a = ap.parse_args()
    ns = [int(x) for x in a.ns.split(",")]
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-conc-"))
    shm = local_dir("conc")
    try:
        root = unpack(bundles_of_this_venv(work), shm / "shoal")
        base = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        variants = {
            "shared prefix": ([sys.executable, "-c", "import numpy"], base),
            "local copy": (
                [str(python_executable(root)), "-c", "import numpy"],
                rerouted_environ(root, base=base),
            ),
        }
        shared = sorted(
            {
                sys.prefix,
                sys.base_prefix,
                os.path.realpath(sys.prefix),
                os.path.realpath(sys.base_prefix),
            }
        )
        per_proc = {k: shared_syscalls(c, e, shared, str(work)) for k, (c, e) in variants.items()}
        load0 = loadavg()
        res: dict[str, dict[int, list[float]]] = {k: {n: [] for n in ns} for k in variants}
        for _ in range(a.reps):
            for n in ns:
                for k, (c, e) in variants.items():  # interleaved so load drifts hit both alike
                    wave(c, e, 1, str(work))  # warm the page cache for this variant
                    res[k][n].append(wave(c, e, n, str(work)))
        print(
            f"load average before: {load0}, after: {loadavg()}; {a.reps} reps, median (min) seconds, "
            f"{os.cpu_count()} cores\n"
        )
        print(
            "| N | shared prefix: wall s | local copy: wall s | shared-FS file syscalls, shared prefix "
            "| shared-FS file syscalls, local copy |"
        )
        print("|---|---|---|---|---|")
        for n in ns:
            s, loc = res["shared prefix"][n], res["local copy"][n]
            print(
                f"| {n} | {statistics.median(s):.2f} ({min(s):.2f}) | {statistics.median(loc):.2f} "
                f"({min(loc):.2f}) | {n * per_proc['shared prefix']} | {n * per_proc['local copy']} |"
            )
        save(
            "concurrent",
            {"ns": ns, "seconds": res, "per_process_shared_syscalls": per_proc, "load": load0},
        )
    finally:
        remove(work, shm)


if __name__ == "__main__":
    main()
