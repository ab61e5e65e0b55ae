"""MPI broadcast with real OpenMPI ranks (oversubscribed on this machine)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.bundle.archive import sidecar_path

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None,
                                reason="mpirun not installed (scripts/setup-bundle-deps.sh installs OpenMPI)")
MPIRUN = "mpirun --oversubscribe --allow-run-as-root --bind-to none"


def _bcast(bundles, to, n, *extra):
    pytest.importorskip("mpi4py")
    cmd = [sys.executable, "-m", "shoal.cli.main", "bcast", *map(str, bundles), "--to", str(to),
           "--transport", "mpi", "--mpirun", f"{MPIRUN} -n {n}", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=240)


def test_mpi_bcast_to_every_rank_then_run_from_copy(bundles, local_base):
    base = local_base / "mpi"
    r = _bcast(bundles, f"{base}/r{{rank}}/shoal", 3, "--receivers", "per-rank", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["summary"]["receivers"] == 3 and report["summary"]["ok"]
    assert report["summary"]["bytes"] == sum(p.stat().st_size for p in bundles)
    listings = []
    for rank in range(3):
        root = base / f"r{rank}" / "shoal"
        listings.append(sorted(str(p.relative_to(root)) for p in root.rglob("*")))
        py = root / "bin" / "python3"
        from shoal.bundle import rerouted_environ

        out = subprocess.run([str(py), "-c", "import numpy; print(numpy.__file__)"],
                             env=rerouted_environ(root), capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().startswith(str(root) + "/")
    assert listings[0] == listings[1] == listings[2] and len(listings[0]) > 1000
    r = _bcast([], f"{base}/r{{rank}}/shoal", 3, "--receivers", "per-rank", "--cleanup")
    assert r.returncode == 0, r.stderr
    assert not base.exists()  # the directories made for the copies went too


def test_mpi_one_receiver_per_node_under_mpirun_with_auto(bundles, local_base):
    # `mpirun ... shoal bcast` (the user's own launch): auto sees an MPI job and takes part in it
    pytest.importorskip("mpi4py")
    base = local_base / "mpi-node"
    cmd = [*MPIRUN.split(), "-n", "3", sys.executable, "-m", "shoal.cli.main", "bcast", str(bundles[-1]),
           "--to", f"{base}/shoal", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=240)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["summary"]["receivers"] == 1  # 3 ranks, one host
    assert (base / "shoal" / "app" / "main.py").exists()
    shutil.rmtree(base)


def test_mpi_corrupt_bundle_switches_no_node(bundles, local_base, tmp_path):
    base = local_base / "mpi-bad"
    good = bundles[-1]
    r = _bcast([good], f"{base}/r{{rank}}/shoal", 2, "--receivers", "per-rank")
    assert r.returncode == 0, r.stderr
    bad = tmp_path / bundles[0].name
    shutil.copy(bundles[0], bad)
    shutil.copy(sidecar_path(bundles[0]), sidecar_path(bad))
    with open(bad, "r+b") as f:
        f.seek(bad.stat().st_size // 3)
        f.write(b"\0" * 4096)
    r = _bcast([bad], f"{base}/r{{rank}}/shoal", 2, "--receivers", "per-rank")
    assert r.returncode == 1
    assert "checksum mismatch" in r.stderr and bad.name in r.stderr
    assert "nothing was switched on any node" in r.stderr
    for rank in range(2):
        d = base / f"r{rank}"
        root = d / "shoal"
        assert (root / "app" / "main.py").exists() and not (root / "bin").exists()
        # no staging directory left: the link, its one generation, the record of made dirs
        assert len(os.listdir(d)) == 3, os.listdir(d)
    shutil.rmtree(base)
