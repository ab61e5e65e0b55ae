"""Broadcast ~300 MB of bundles to 2..16 MPI ranks (OpenMPI, oversubscribed on one host),
each rank its own receiver (as if each were a node), and time the stages.

    nice python bench/bundle/bcast_stages.py [--ranks 2,4,8,16] [--mb 300]

Bundles: tier 1 + tier 2 of this venv (real files, ~90 MB compressed) plus an app tier of
incompressible 1 MB files filling up to --mb. Two modes per rank count:
  staged     (--no-pipeline): receive everything, then unpack -> time per stage
  pipelined  (default): unpack while later chunks arrive -> end-to-end time
Everything it makes (bundles, copies) is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, bundles_of_this_venv, loadavg, local_dir, remove, save

from shoal.bundle import build

MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]


def run(bundles: list[Path], dest: str, n: int, pipelined: bool) -> dict:
    cmd = [
        *MPIRUN,
        "-n",
        str(n),
        sys.executable,
        "-m",
        "shoal.bundle.mpi",
        *map(str, bundles),
        "--to",
        dest,
        "--receivers",
        "per-rank",
        "--json",
    ] + ([] if pipelined else ["--no-pipeline"])
    t0 = time.perf_counter()
    r = subprocess.run(
        cmd, capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO))
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"mpirun failed ({r.returncode}): {r.stderr[-2000:]}")
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    recv = rep["receivers"]
    return {
        "ranks": n,
        "pipelined": pipelined,
        "bytes": rep["summary"]["bytes"],
        "mpirun_wall_s": wall,
        "bcast_s": max(x["bcast_s"] for x in recv),
        "unpack_s": max(x["bcast_and_unpack_s"] - x["bcast_s"] for x in recv),
        "bcast_and_unpack_s": max(x["bcast_and_unpack_s"] for x in recv),
        "total_s": rep["summary"]["total_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="2,4,8,16")
    ap.add_argument("--mb", type=int, default=300)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-bcast-"))
    shm = local_dir("bcast")
    try:
        tiers = bundles_of_this_venv(work)
        have = sum(p.stat().st_size for p in tiers)
        app = work / "app"
        app.mkdir()
        for i in range(max(0, (a.mb * 10**6 - have) // 10**6)):
            (app / f"blob{i:04d}.bin").write_bytes(os.urandom(10**6))
        bundles = tiers + [build(work / "bundles", tiers=(), app=app)[0].path]
        remove(app)
        total_mb = sum(p.stat().st_size for p in bundles) / 1e6
        load0 = loadavg()
        rows = []
        for n in [int(x) for x in a.ranks.split(",")]:
            for pipelined in (False, True):
                dest = shm / f"n{n}-{'p' if pipelined else 's'}"
                rows.append(run(bundles, f"{dest}/r{{rank}}/shoal", n, pipelined))
                remove(dest)
        print(
            f"{total_mb:.0f} MB in {len(bundles)} bundles; OpenMPI, one host, {os.cpu_count()} cores, "
            f"oversubscribed; load average before {load0}, after {loadavg()}\n"
        )
        print(
            "| ranks | staged: bcast s | staged: unpack s | staged: total s | pipelined: total s "
            "| pipelined: bcast s | mpirun wall s (pipelined) |"
        )
        print("|---|---|---|---|---|---|---|")
        for s, p in zip(rows[::2], rows[1::2], strict=True):
            print(
                f"| {s['ranks']} | {s['bcast_s']:.2f} | {s['unpack_s']:.2f} | {s['bcast_and_unpack_s']:.2f} "
                f"| {p['bcast_and_unpack_s']:.2f} | {p['bcast_s']:.2f} | {p['mpirun_wall_s']:.2f} |"
            )
        save("bcast", {"mb": total_mb, "rows": rows, "load": load0})
    finally:
        remove(work, shm)


if __name__ == "__main__":
    main()
