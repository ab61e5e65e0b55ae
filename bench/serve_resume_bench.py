"""What resumable jobs cost `shoal serve`: the same NCO job (bench/serve_bench.py's ensemble
workflow on CMIP-like inputs) sent alternately to a service that runs jobs resumable (the
default: plan kept, head journal, intermediates on disk) and one started with ``--no-resume``
(intermediates in the sandbox's /dev/shm, no journal). End-to-end time of ``shoal submit``
(upload the script, run, download the results as a tar), medians, and the ratio; the results
of both are checked equal (ncdump). Needs root (the sandbox).

    python bench/serve_resume_bench.py [--models 8] [--size small] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "script")]
from bench_nco import SIZES  # noqa: E402
from serve_bench import REPO, RESULTS, _env, dump, generate, submit  # noqa: E402


def start(work: str, data: str, name: str, extra: list[str], token: str,
          workers: int) -> tuple[subprocess.Popen[str], str]:
    jobs = os.path.join(work, f"jobs-{name}")
    shutil.rmtree(jobs, ignore_errors=True)
    os.makedirs(jobs)
    tokfile = os.path.join(jobs, "tokens.toml")
    fd = os.open(tokfile, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f'[tokens.bench]\ntoken = "{token}"\n')
    srv = subprocess.Popen([sys.executable, "-m", "shoal", "serve", "--data", data, "--jobs",
                            jobs, "--tokens", tokfile, "--listen", "127.0.0.1:0",
                            "--max-running", "1", "--workers", str(workers), *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           env=_env())
    line = srv.stdout.readline()  # type: ignore[union-attr]
    if "listening on " not in line:
        srv.kill()
        sys.exit(f"shoal serve ({name}) did not start")
    return srv, line.split("listening on ", 1)[1].strip().rstrip("/")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(REPO, "bench", ".work", "serve_resume"))
    a = ap.parse_args()
    data = os.path.join(a.work, "data")
    shutil.rmtree(data, ignore_errors=True)
    generate(data, a.models, *SIZES[a.size])
    token = secrets.token_hex(20)
    modes = {"resumable": [], "--no-resume": ["--no-resume"]}
    servers = {m: start(a.work, data, m.strip("-"), extra, token, a.workers)
               for m, extra in modes.items()}
    times: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for k in range(a.repeat):
            order = list(modes) if k % 2 == 0 else list(modes)[::-1]  # A/B, then B/A
            for m in order:
                dt, _ = submit(servers[m][1], token, os.path.join(a.work, m.strip("-")))
                times[m].append(dt)
        for f in RESULTS:
            assert dump(os.path.join(a.work, "resumable", "out", f)) == \
                dump(os.path.join(a.work, "no-resume", "out", f)), f
    finally:
        for srv, _ in servers.values():
            srv.terminate()
            srv.wait(30)
    med = {m: statistics.median(t) for m, t in times.items()}
    print(json.dumps({"models": a.models, "size": a.size, "repeat": a.repeat, "times": times,
                      "median_s": med,
                      "resumable_over_no_resume": med["resumable"] / med["--no-resume"]}))


if __name__ == "__main__":
    main()
