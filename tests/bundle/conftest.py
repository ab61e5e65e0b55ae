"""Shared fixtures: bundles of this very venv (tiers 1-3), built once per session."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from shoal.bundle import build, unpack_bundles

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def local_base() -> Path:
    """A per-session directory on node-local storage (/dev/shm when there is one)."""
    where = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = Path(tempfile.mkdtemp(prefix="shoal-test-", dir=where))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def app_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("app")
    (d / "myapp.py").write_text("import os\nWHERE = __file__\nMESSAGE = 'hello from the app'\n")
    (d / "main.py").write_text("import myapp\nprint(myapp.WHERE)\n")
    (d / "data").mkdir()
    (d / "data" / "x.txt").write_text("x\n")
    (d / ".git").mkdir()
    (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return d


@pytest.fixture(scope="session")
def bundles(tmp_path_factory, app_dir) -> list[Path]:
    """Tier 1 (interpreter + stdlib), tier 2 (this venv's packages, numpy among them), tier 3."""
    out = tmp_path_factory.mktemp("bundles")
    results = build(out, python=sys.executable, app=app_dir)
    assert [r.tier for r in results] == ["python", "packages", "app"]
    return [r.path for r in results]


@pytest.fixture(scope="session")
def root(bundles, local_base) -> Path:
    """The bundles unpacked once into node-local storage; tests must not modify it."""
    dest = local_base / "shared-root" / "shoal"
    unpack_bundles(bundles, dest)
    return dest


@pytest.fixture()
def original_prefixes() -> list[str]:
    """Where this interpreter's files really live (what a rerouted one must not touch)."""
    return sorted({os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), sys.prefix, sys.base_prefix})
