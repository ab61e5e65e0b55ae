"""Helpers shared by the bundle benchmarks: build/unpack this venv into node-local storage."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from shoal.bundle import build, unpack_bundles  # noqa: E402

RAW = REPO / "bench" / "results" / "raw"


def local_dir(tag: str) -> Path:
    """A fresh private directory in /dev/shm (node-local RAM disk) for one benchmark."""
    return Path(tempfile.mkdtemp(prefix=f"shoal-bench-{tag}-", dir="/dev/shm"))


def bundles_of_this_venv(work: Path) -> list[Path]:
    """Tier 1 + tier 2 bundles of the interpreter running the benchmark (numpy included)."""
    return [r.path for r in build(work / "bundles", python=sys.executable)]


def unpack(bundles: list[Path], dest: Path) -> Path:
    unpack_bundles(bundles, dest)
    return dest


def remove(*paths: Path) -> None:
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


def loadavg() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def save(name: str, data: object) -> Path:
    import json

    RAW.mkdir(parents=True, exist_ok=True)
    out = RAW / f"bundle-{name}.json"
    out.write_text(json.dumps(data, indent=1))
    return out


__all__ = ["REPO", "local_dir", "bundles_of_this_venv", "unpack", "remove", "loadavg", "save", "os"]
