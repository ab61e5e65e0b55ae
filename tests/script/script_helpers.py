"""Helpers for the script-compiler tests: small netCDF inputs (made with ncgen), running a
script under bash and under `shoal script`, and comparing the files they leave."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NCO = shutil.which("ncks") is not None and shutil.which("ncgen") is not None
needs_nco = pytest.mark.skipif(not NCO, reason="NCO/netcdf-bin not installed "
                               "(scripts/setup-script-deps.sh)")
REPO = Path(__file__).resolve().parents[2]


def write_model(path: Path, idx: int, nt: int = 24, nlat: int = 4, nlon: int = 6) -> None:
    """A CMIP-like tas(time, lat, lon) file, deterministic per ``idx`` (record dim: time)."""
    vals = []
    for t in range(nt):
        for j in range(nlat):
            for i in range(nlon):
                v = 280.0 + 10 * ((j * 7 + i * 3 + idx * 5) % 11) / 11 + (t % 12) * 0.5 \
                    + 0.01 * t + idx * 0.3
                vals.append(f"{v:.3f}")
    times = ", ".join(str(t * 30.4 + 15) for t in range(nt))
    lats = ", ".join(str(-90 + 180 * (j + 0.5) / nlat) for j in range(nlat))
    lons = ", ".join(str(360 * i / nlon) for i in range(nlon))
    cdl = f"""netcdf m {{
dimensions: time = UNLIMITED ; lat = {nlat} ; lon = {nlon} ;
variables:
  double time(time) ; time:units = "days since 2000-01-01" ; time:calendar = "noleap" ;
  double lat(lat) ; lat:units = "degrees_north" ;
  double lon(lon) ; lon:units = "degrees_east" ;
  float tas(time, lat, lon) ; tas:units = "K" ;
  :source = "model{idx}" ;
data:
  time = {times} ;
  lat = {lats} ;
  lon = {lons} ;
  tas = {", ".join(vals)} ;
}}
"""
    subprocess.run(["ncgen", "-o", str(path), "-"], input=cdl.encode(), check=True)


MODELS = ["ccma_cgcm3_1", "ncar_ccsm3_0", "gfdl_cm2_0", "miroc3_2_medres"]


def make_models(d: Path, n: int = 2, **kw: int) -> list[str]:
    """``sresalb_<model>.nc`` for the first ``n`` models; returns the model names."""
    for k, m in enumerate(MODELS[:n]):
        write_model(d / f"sresalb_{m}.nc", k, **kw)
    return MODELS[:n]


_VOLATILE = re.compile(r'^\s*(:history|:NCO|:history_of_appended_files)\s*=.*?;\s*$',
                       re.MULTILINE | re.DOTALL)


def ncdump_normal(path: Path) -> str:
    """``ncdump`` text without the attributes NCO fills with time and command line."""
    text = subprocess.run(["ncdump", str(path)], capture_output=True, text=True,
                          check=True).stdout
    out, skip = [], False
    for line in text.splitlines():
        s = line.strip()
        if skip:
            skip = not s.endswith(";")
            continue
        if re.match(r"^:(history|NCO|history_of_appended_files)\s*=", s):
            skip = not s.endswith(";")
            continue
        out.append(line)
    return "\n".join(out)


def snapshot(d: Path) -> dict[str, str | bytes]:
    """Every file under ``d`` (netCDF as normalised ncdump text), by relative path."""
    files: dict[str, str | bytes] = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        if rel.startswith(".shoal-scratch"):
            continue
        if p.is_dir():
            files[rel + "/"] = b""
        elif p.suffix == ".nc" and p.read_bytes()[:3] in (b"CDF", b"\x89HD"):
            files[rel] = ncdump_normal(p)
        else:
            files[rel] = p.read_bytes()
    return files


def shm_leftovers(pid: int | None = None) -> set[str]:
    """Memory scratch directories of the `shoal script` process ``pid`` (all when None): they
    are named after the process, so other runs on the machine do not count."""
    return set(glob.glob(f"/dev/shm/shoal-script-{pid}-*" if pid else "/dev/shm/shoal-script-*"))


class ShoalRun(subprocess.CompletedProcess):  # type: ignore[type-arg]
    """A finished `shoal script` run and the pid it ran as (its scratch is named after it)."""

    pid: int = 0


def run_shoal(d: Path, script: str, *args: str, extra: tuple[str, ...] = (),
              timeout: float = 120) -> ShoalRun:
    cmd = [sys.executable, "-m", "shoal", "script", *extra, script, *args]
    with subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise
    run = ShoalRun(cmd, p.returncode, out, err)
    run.pid = p.pid
    return run


def run_bash(d: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", script, *args], cwd=d, capture_output=True, text=True,
                          timeout=120)


def compare(tmp_path: Path, source: str, setup, *args: str, extra: tuple[str, ...] = ()
            ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """Run ``source`` under bash and shoal in two copies of the same inputs; assert the files
    are equal and no scratch is left. Returns (bash, shoal) results."""
    a, b = tmp_path / "bash", tmp_path / "shoal"
    for d in (a, b):
        d.mkdir()
        setup(d)
        (d / "job.sh").write_text(source)
    rb = run_bash(a, "job.sh", *args)
    rs = run_shoal(b, "job.sh", *args, extra=extra)
    assert rs.returncode == rb.returncode, (rb.stderr, rs.stderr)
    sa, sb = snapshot(a), snapshot(b)
    assert sorted(sa) == sorted(sb), (set(sa) ^ set(sb), rs.stderr)
    for k in sa:
        assert sa[k] == sb[k], f"{k} differs\n{rs.stderr}"
    assert not list(b.glob(".shoal-scratch*")), "disk scratch left behind"
    assert not shm_leftovers(rs.pid), "memory scratch left behind"
    return rb, rs
