"""Tier building: content keys, reuse, relocatable output, pip tier."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from shoal.bundle import build, python_executable, unpack_bundles

REPO = Path(__file__).resolve().parents[2]


def test_unchanged_tier_is_not_rebuilt(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "a.py").write_text("A = 1\n")
    out = tmp_path / "out"
    (first,) = build(out, tiers=(), app=app)
    assert first.built
    mtime = first.path.stat().st_mtime_ns
    (again,) = build(out, tiers=(), app=app)
    assert not again.built and again.path == first.path
    assert first.path.stat().st_mtime_ns == mtime
    time.sleep(0.01)
    (app / "a.py").write_text("A = 2\n")
    (changed,) = build(out, tiers=(), app=app)
    assert changed.built and changed.path != first.path
    # the CLI prints the paths, one a line, and says what it did
    r = subprocess.run([sys.executable, "-m", "shoal.cli.main", "bundle", "--out", str(out), "--tiers", "app",
                        "--app", str(app)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(changed.path)]
    assert "app: unchanged" in r.stderr


def test_bundle_works_unpacked_elsewhere_and_moved(bundles, local_base):
    # built from this venv's prefix, unpacked at an unrelated path, then the whole tree
    # moved again: interpreter, libpython, extension modules and console scripts still work
    dest = local_base / "elsewhere" / "a" / "shoal"
    unpack_bundles(bundles, dest)
    moved = local_base / "moved-here"
    os.rename(os.path.realpath(dest), moved)
    py = python_executable(moved)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LD_LIBRARY_PATH", "VIRTUAL_ENV"))}
    # no PYTHONHOME, no LD_LIBRARY_PATH: found through $ORIGIN RUNPATHs and getpath's landmarks
    r = subprocess.run([str(py), "-c", "import sys, numpy, _ssl, json; print(json.dumps([sys.prefix, "
                        "numpy.__file__, _ssl.__file__, numpy.arange(3).sum().item()]))"],
                       env=env, capture_output=True, text=True, cwd="/", timeout=120)
    assert r.returncode == 0, r.stderr
    prefix, np_file, ssl_file, total = json.loads(r.stdout)
    assert prefix == str(moved)
    assert np_file.startswith(str(moved)) and ssl_file.startswith(str(moved)) and total == 3
    maps = subprocess.run([str(py), "-c", "print(open('/proc/self/maps').read())"], env=env,
                          capture_output=True, text=True, timeout=60).stdout
    if "libpython" in maps:  # a --enable-shared build: libpython must come from the copy
        assert f"{moved}/lib/libpython" in maps
    assert os.path.realpath(sys.base_prefix) not in maps and sys.prefix not in maps
    # console scripts: shebangs are relocatable (no path of the build prefix left)
    pip = moved / "bin" / "pip"
    assert sys.prefix.encode() not in pip.read_bytes()
    r = subprocess.run([str(pip), "--version"], env=dict(env, PATH=f"{moved}/bin:/usr/bin:/bin"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert str(moved) in r.stdout  # pip reports where it runs from
    shutil.rmtree(moved)
    from shoal.bundle import cleanup

    cleanup(dest)


def _make_wheel(d: Path) -> Path:
    """A minimal pure-Python wheel with a console script (pip installs it offline)."""
    name, ver = "shoaltestpkg", "1.0"
    whl = d / f"{name}-{ver}-py3-none-any.whl"
    di = f"{name}-{ver}.dist-info"
    files = {
        f"{name}/__init__.py": "def main():\n    import sys\n    print('tool ran from', sys.prefix)\n",
        f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n",
        f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{di}/entry_points.txt": f"[console_scripts]\nshoaltool = {name}:main\n",
    }
    with zipfile.ZipFile(whl, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{di}/RECORD", "".join(f"{k},,\n" for k in files) + f"{di}/RECORD,,\n")
    return whl


def test_pip_tier(bundles, tmp_path, local_base, monkeypatch):
    whl = _make_wheel(tmp_path)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    res = build(tmp_path / "out", tiers=(), pip=[str(whl)])
    assert [r.tier for r in res] == ["pip"] and res[0].built
    assert not build(tmp_path / "out", tiers=(), pip=[str(whl)])[0].built
    dest = local_base / "piptier" / "shoal"
    unpack_bundles([bundles[0], res[0].path], dest)
    from shoal.bundle import rerouted_environ

    r = subprocess.run(["shoaltool"], env=rerouted_environ(dest), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"tool ran from {dest}"
    from shoal.bundle import cleanup

    cleanup(dest)


def test_editable_pth_outside_is_dropped_with_a_warning(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    outside = tmp_path / "outside-src"
    outside.mkdir()
    (site / "legacy-editable.pth").write_text(f"{outside}\nimport os\n")
    (res,) = build(tmp_path / "out", python=str(venv / "bin" / "python"), tiers=("packages",))
    assert any("dropped path" in w and str(outside) in w for w in res.warnings)
    import tarfile

    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(open(res.path, "rb")) as z, tarfile.open(fileobj=z, mode="r|") as t:
        for m in t:
            if m.name.endswith("legacy-editable.pth"):
                text = t.extractfile(m).read().decode()
                break
    assert str(outside) not in text and "import os" in text


@pytest.mark.parametrize("bad", ["nope"])
def test_unknown_tier_is_refused(tmp_path, bad):
    from shoal.bundle import BundleError

    with pytest.raises(BundleError, match=f"unknown tier '{bad}'"):
        build(tmp_path, tiers=(bad,))
