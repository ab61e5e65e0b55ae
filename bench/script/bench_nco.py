"""NCO workflow benchmark: `bash SCRIPT` vs `shoal script SCRIPT` on 19 models.

SCRIPT is ipcc_like.sh (119 commands for 19 models: the SWAMP paper's ensemble workflow) or,
with ``--script yearly.sh``, a year-by-year workflow of 1,000+ commands (use --size small: its
tas has 120 monthly records, 10 years).

Generates synthetic CMIP-like inputs (tas(time, lat, lon), time as record dimension) with
ncgen + ncap2, then times, on fresh copies of the inputs each run:

* ``bash SCRIPT``
* ``shoal script -j WORKERS SCRIPT`` (intermediates in /dev/shm)
* the same with ``--no-shm`` (intermediates on disk)

and checks that the results (biases.nc, ens_anmfld.nc, ...) equal bash's (ncdump, ignoring
history/NCO attributes). Prints the median of --repeat runs and the load average around them.

    python bench/script/bench_nco.py [--size small|large] [--models 19] [--repeat 3]
                                     [--script ipcc_like.sh|yearly.sh]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SIZES = {"small": (120, 64, 128), "large": (1200, 128, 160)}
MODELS = [
    "ccma_cgcm3_1",
    "ncar_ccsm3_0",
    "bccr_bcm2_0",
    "cnrm_cm3",
    "csiro_mk3_0",
    "gfdl_cm2_0",
    "gfdl_cm2_1",
    "giss_aom",
    "giss_model_e_r",
    "iap_fgoals1_0_g",
    "inmcm3_0",
    "ipsl_cm4",
    "miroc3_2_medres",
    "miub_echo_g",
    "mpi_echam5",
    "mri_cgcm2_3_2a",
    "ncar_pcm1",
    "ukmo_hadcm3",
    "ukmo_hadgem1",
]


def generate(d: str, models: int, nt: int, nlat: int, nlon: int) -> None:
    """sresalb_<model>.nc: a skeleton from ncgen, tas filled by ncap2 (deterministic)."""
    os.makedirs(d, exist_ok=True)
    times = ", ".join(f"{m * 365 / 12 + 15:.2f}" for m in range(nt))
    cdl = (
        f"netcdf skel {{ dimensions: time = UNLIMITED ; lat = {nlat} ; lon = {nlon} ;\n"
        'variables: double time(time) ; time:units = "days since 2000-01-01" ;'
        ' time:calendar = "noleap" ; double lat(lat) ; lat:units = "degrees_north" ;'
        ' double lon(lon) ; lon:units = "degrees_east" ;\n'
        f"data: time = {times} ; }}\n"
    )
    skel = os.path.join(d, "skel.nc")
    subprocess.run(["ncgen", "-o", skel, "-"], input=cdl.encode(), check=True)
    dlat, dlon = 180.0 / nlat, 360.0 / nlon
    for k, m in enumerate(MODELS[:models]):
        algebra = (
            f"lat=array({-90 + dlat / 2},{dlat},$lat); lon=array(0.0,{dlon},$lon);"
            f"tas[$time,$lat,$lon]=float(285.0-30.0*sin(lat*0.01745)^2"
            f"+10.0*sin(lat*0.01745)*cos(6.2832*(time-15.0)/365.0)"
            f"+{0.02 + 0.001 * k}*time/365.0+{(k % 7) * 0.4 - 1.2}"
            f"+0.5*sin(lon*{0.07 + 0.01 * k}+time*0.37+lat*{0.2 + 0.02 * k}));"
            'tas@units="K";tas@long_name="Surface Air Temperature";'
            f'global@source="{m} (synthetic)"'
        )
        subprocess.run(
            ["ncap2", "-O", "-h", "-s", algebra, skel, os.path.join(d, f"sresalb_{m}.nc")],
            check=True,
        )
    os.unlink(skel)


def fresh(src: str, dst: str, script: str) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for name in os.listdir(src):
        os.link(os.path.join(src, name), os.path.join(dst, name))  # inputs are only read
    shutil.copy(os.path.join(HERE, script), dst)


def timed(cmd: list[str], cwd: str) -> float:
    t = time.perf_counter()
    r = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO}
    )
    dt = time.perf_counter() - t
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return dt


def dump(path: str) -> str:
    text = subprocess.run(["ncdump", path], capture_output=True, text=True, check=True).stdout
    return re.sub(r"\n\s*:(history|NCO) = .*?;(?=\n)", "", text, flags=re.DOTALL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=19)
    ap.add_argument("--size", choices=sorted(SIZES), default="large",
                    help="small: tas(120,64,128), 3.9 MB a model; large: tas(1200,128,160), "
                         "98 MB a model (the test-bed sizes)")
    ap.add_argument("--time", type=int)
    ap.add_argument("--lat", type=int)
    ap.add_argument("--lon", type=int)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(REPO, "bench", ".work", "script-nco"))
    ap.add_argument("--script", default="ipcc_like.sh", choices=["ipcc_like.sh", "yearly.sh"])
    a = ap.parse_args()
    nt, nlat, nlon = SIZES[a.size]
    a.time, a.lat, a.lon = a.time or nt, a.lat or nlat, a.lon or nlon
    data = os.path.join(a.work, f"data-{a.models}-{a.time}-{a.lat}-{a.lon}")
    if not os.path.isdir(data):
        t = time.perf_counter()
        generate(data, a.models, a.time, a.lat, a.lon)
        print(
            f"generated {a.models} models tas({a.time},{a.lat},{a.lon}) in "
            f"{time.perf_counter() - t:.1f} s"
        )
    size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
    py = sys.executable
    variants = {
        "bash": ["bash", a.script],
        "shoal": [py, "-m", "shoal", "script", "-j", str(a.workers), a.script],
        "shoal --no-shm": [
            py,
            "-m",
            "shoal",
            "script",
            "-j",
            str(a.workers),
            "--no-shm",
            a.script,
        ],
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    load0 = os.getloadavg()[0]
    for _ in range(a.repeat):
        for name, cmd in variants.items():  # interleaved, so load drifts hit all alike
            d = os.path.join(a.work, "run-" + name.replace(" ", ""))
            fresh(data, d, a.script)
            times[name].append(timed(cmd, d))
    load1 = os.getloadavg()[0]
    ref = os.path.join(a.work, "run-bash")
    for name in ("shoal", "shoal --no-shm"):
        d = os.path.join(a.work, "run-" + name.replace(" ", ""))
        inputs = set(os.listdir(data))
        outs = sorted(f for f in os.listdir(ref) if f.endswith(".nc") and f not in inputs)
        assert outs == sorted(f for f in os.listdir(d) if f.endswith(".nc") and f not in inputs)
        for f in outs:
            assert dump(os.path.join(ref, f)) == dump(os.path.join(d, f)), (name, f)
    base = statistics.median(times["bash"])
    print(
        f"{a.script}: {a.models} models, {size / 1e6:.1f} MB of input, {a.workers} workers, "
        f"load average {load0:.1f} -> {load1:.1f}; results identical to bash"
    )
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"  {name:15s} median {med:6.2f} s  (runs: {', '.join(f'{t:.2f}' for t in ts)})"
            f"  speedup vs bash {base / med:4.2f}x"
        )


if __name__ == "__main__":
    main()
