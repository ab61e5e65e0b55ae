"""SWAMP's comparison for `shoal serve`: fetch the inputs and run locally, or send the script
and fetch the result.

On CMIP-like inputs (tas(time, lat, lon) per model, made by bench/script/bench_nco.py's
generator), the ensemble workflow of bench/script/ipcc_like.sh (reading the models from $1) is
run end to end in two ways, alternating, ``--repeat`` times:

* **fetch + local**: list the service's data directory, download every input over HTTP
  (``GET /api/v1/data/NAME``), run ``bash job.sh DIR`` on the local copies;
* **serve**: ``shoal submit URL job.sh /data`` (uploads the script, the service runs it in its
  sandbox next to the data, the client downloads the outputs as a tar).

Both produce the same result files (checked with ncdump). The client and the service talk over
loopback inside a network namespace made for the run: ``--rates loopback,100mbit`` runs once
with the plain loopback and once with its bandwidth capped by ``tc tbf`` (a real kernel-shaped
link; the machine has no netem, so no added latency). Needs root (netns, tc, the sandbox).

    python bench/serve_bench.py [--models 19] [--size small] [--repeat 3]
                                [--rates loopback,100mbit,1gbit]
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
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "script"))
from bench_nco import SIZES, dump, generate  # noqa: E402

JOB = """#!/bin/bash
# bench/script/ipcc_like.sh, reading the models from the directory $1
DATA=$1
MODELS=""
for f in $DATA/sresalb_*.nc; do m=${f##*/sresalb_}; MODELS="$MODELS ${m%.nc}"; done
for mdl in $MODELS; do
  ncwa -a lat,lon $DATA/sresalb_${mdl}.nc avg_${mdl}.nc
  ncra --mro -d time,,,12,12 avg_${mdl}.nc ann_${mdl}.nc
  ncra --mro -d time,,,12,12 $DATA/sresalb_${mdl}.nc fld_${mdl}.nc
done
nces ann_*.nc ens_ann.nc
nces fld_*.nc ens_fld.nc
for mdl in $MODELS; do
  ncdiff ann_${mdl}.nc ens_ann.nc anm_${mdl}.nc
  ncdiff fld_${mdl}.nc ens_fld.nc anmfld_${mdl}.nc
  ncwa -a time anm_${mdl}.nc bias_${mdl}.nc
done
ncecat -u model bias_*.nc biases.nc
nces anmfld_*.nc ens_anmfld.nc
rm avg_*.nc ann_*.nc fld_*.nc anm_*.nc anmfld_*.nc
"""
RESULTS = ("biases.nc", "ens_anmfld.nc", "ens_ann.nc", "ens_fld.nc")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO}


def fetch_and_run(url: str, token: str, work: str) -> tuple[float, int, float]:
    """Download every input, run bash on them; (seconds, bytes downloaded, seconds of the
    download alone)."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "inputs"))
    hdr = {"Authorization": f"Bearer {token}"}
    t = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(f"{url}/api/v1/data", headers=hdr)) as r:
        entries = json.loads(r.read())["entries"]
    got = 0
    for e in entries:
        if e["type"] != "file":
            continue
        req = urllib.request.Request(f"{url}/api/v1/data/{e['name']}", headers=hdr)
        with urllib.request.urlopen(req) as r, \
                open(os.path.join(work, "inputs", e["name"]), "wb") as f:
            while chunk := r.read(1 << 20):
                f.write(chunk)
                got += len(chunk)
    fetched = time.perf_counter() - t
    with open(os.path.join(work, "job.sh"), "w") as f:
        f.write(JOB)
    subprocess.run(["bash", "job.sh", os.path.join(work, "inputs")], cwd=work, check=True,
                   capture_output=True)
    return time.perf_counter() - t, got, fetched


def submit(url: str, token: str, work: str) -> tuple[float, int]:
    """`shoal submit`: (seconds, bytes of results downloaded)."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(os.path.join(work, "job.sh"), "w") as f:
        f.write(JOB)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "shoal", "submit", f"--token={token}", "-q",
                        "--delete", "-o", os.path.join(work, "out"), url,
                        os.path.join(work, "job.sh"), "/data"],
                       capture_output=True, text=True, env=_env())
    dt = time.perf_counter() - t
    if r.returncode:
        sys.exit(f"shoal submit failed ({r.returncode}): {r.stderr[-2000:]}")
    out = os.path.join(work, "out")
    return dt, sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))


def inner(a: argparse.Namespace) -> None:
    """In the namespace: start the service, time both ways, print one JSON line."""
    token = secrets.token_hex(20)
    jobs = os.path.join(a.work, f"jobs-{a.rate}")
    shutil.rmtree(jobs, ignore_errors=True)
    os.makedirs(jobs)
    tokfile = os.path.join(jobs, "tokens.toml")
    fd = os.open(tokfile, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f'[tokens.bench]\ntoken = "{token}"\n')
    srv = subprocess.Popen([sys.executable, "-m", "shoal", "serve", "--data", a.data,
                            "--jobs", jobs, "--tokens", tokfile, "--listen", "127.0.0.1:0",
                            "--max-running", "1", "--workers", str(a.workers),
                            "--max-upload", "16M"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           env=_env())
    try:
        line = srv.stdout.readline()  # type: ignore[union-attr]
        url = line.split("listening on ", 1)[1].strip().rstrip("/")
        times: dict[str, list[float]] = {"fetch + local": [], "serve": []}
        moved = {}
        fetch_s: list[float] = []
        for _ in range(a.repeat):
            dt, moved["fetch + local"], f_s = fetch_and_run(url, token,
                                                            os.path.join(a.work, "local"))
            times["fetch + local"].append(dt)
            fetch_s.append(f_s)
            dt, moved["serve"] = submit(url, token, os.path.join(a.work, "remote"))
            times["serve"].append(dt)
        for f in RESULTS:
            assert dump(os.path.join(a.work, "local", f)) == \
                dump(os.path.join(a.work, "remote", "out", f)), f
        print(json.dumps({"rate": a.rate, "times": times, "bytes": moved,
                          "fetch_s": fetch_s}))
    finally:
        srv.terminate()
        srv.wait(30)
        shutil.rmtree(jobs, ignore_errors=True)


def _rate_bytes(rate: str) -> int:
    """tc's ``100mbit``/``1gbit``/``500kbit`` in bytes per second."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1}
    for u, f in units.items():
        if rate.endswith(u):
            return int(float(rate[: -len(u)]) * f / 8)
    raise SystemExit(f"--rates: {rate!r} is not like 100mbit or 1gbit")


def with_netns(rate: str, argv: list[str]) -> dict[str, object]:
    """Run this script's inner part in a fresh network namespace (lo shaped to ``rate``)."""
    ns = f"shoal-swamp-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        def ip(*cmd: str) -> None:
            subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True)

        ip("ip", "link", "set", "lo", "up")
        if rate != "loopback":
            # Ethernet-sized packets; a bucket of 20 ms of the rate (tbf needs at least
            # rate / HZ, or it caps below the rate)
            ip("ip", "link", "set", "lo", "mtu", "1500")
            burst = max(64 << 10, _rate_bytes(rate) // 50)
            ip("tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate, "burst",
               str(burst), "latency", "100ms")
        r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, __file__, "--inner",
                            "--rate", rate, *argv], capture_output=True, text=True, env=_env())
        if r.returncode:
            sys.exit(f"inner run ({rate}) failed: {r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=19)
    ap.add_argument("--size", choices=sorted(SIZES), default="small",
                    help="small: tas(120,64,128), 3.9 MB a model; large: 98 MB a model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2, help="commands a job runs at once")
    ap.add_argument("--rates", default="loopback,100mbit",
                    help="comma-separated: loopback, or a tc rate like 100mbit, 1gbit")
    ap.add_argument("--work", default=os.path.join(REPO, "bench", ".work", "serve"))
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rate", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        inner(a)
        return
    nt, nlat, nlon = SIZES[a.size]
    data = os.path.join(a.work, f"data-{a.models}-{nt}-{nlat}-{nlon}")
    if not os.path.isdir(data):
        generate(data, a.models, nt, nlat, nlon)
    os.chmod(a.work, 0o755)
    os.chmod(data, 0o755)
    size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    load0 = os.getloadavg()[0]
    print(f"{a.models} models tas({nt},{nlat},{nlon}), {size / 1e6:.1f} MB of input; "
          f"{a.repeat} runs of each way, alternating; job workers {a.workers}")
    for rate in a.rates.split(","):
        res = with_netns(rate, ["--data", data, "--work", a.work, "--repeat", str(a.repeat),
                                "--workers", str(a.workers)])
        times = res["times"]  # type: ignore[index]
        med = {k: statistics.median(v) for k, v in times.items()}  # type: ignore[union-attr]
        moved = res["bytes"]  # type: ignore[index]
        print(f"  link {rate}:")
        for k, ts in times.items():  # type: ignore[union-attr]
            print(f"    {k:14s} median {med[k]:6.2f} s (runs: "
                  f"{', '.join(f'{t:.2f}' for t in ts)}); {moved[k] / 1e6:7.1f} MB "
                  "downloaded")
        fetch = statistics.median(res["fetch_s"])  # type: ignore[arg-type]
        print(f"    (the download alone: median {fetch:.2f} s, "
              f"{moved['fetch + local'] * 8 / fetch / 1e6:.0f} Mbit/s)")
        print(f"    ratio fetch+local / serve: {med['fetch + local'] / med['serve']:.2f}x")
    print(f"  load average {load0:.1f} -> {os.getloadavg()[0]:.1f} (shared machine)")


if __name__ == "__main__":
    main()
