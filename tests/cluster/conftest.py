"""A real local Slurm for cluster tests: 4 virtual nodes n[1-4] x 4 CPUs on this host.

Started once per test session with the project's own copy of the test-bed recipe
(scripts/slurm/slurm-up.sh, which installs Slurm and munge with apt-get when missing) and
stopped at the end; a cluster already running at ``SHOAL_SLURM_DIR`` (default
/tmp/shoal-slurm) is used as it is and left running. Tests are skipped, with the reason,
only where Slurm cannot be installed (not root, no apt-get).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UP = os.path.join(ROOT, "scripts", "slurm", "slurm-up.sh")
DOWN = os.path.join(ROOT, "scripts", "slurm", "slurm-down.sh")


@dataclass
class Slurm:
    conf: str          # SLURM_CONF of the cluster
    env: dict[str, str]  # os.environ plus SLURM_CONF (and PYTHONPATH to this tree)

    def run(self, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), env={**self.env, **kw.pop("env", {})}, text=True,
                              capture_output=True, timeout=timeout, **kw)

    def idle(self, timeout: float = 30) -> None:
        """Wait until no job of this test session is left (a test's jobs must not hold the
        next test's nodes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.run("squeue", "-h").stdout.strip():
                return
            time.sleep(0.2)
        raise AssertionError("Slurm jobs still queued: " + self.run("squeue").stdout)


def _ping(conf: str) -> bool:
    if not os.path.exists(conf) or shutil.which("scontrol") is None:
        return False
    r = subprocess.run(["scontrol", "ping"], env={**os.environ, "SLURM_CONF": conf},
                       capture_output=True, text=True, timeout=30)
    return "UP" in r.stdout


@pytest.fixture(scope="session")
def slurm() -> Iterator[Slurm]:
    tb = os.environ.get("SHOAL_SLURM_DIR", "/tmp/shoal-slurm")
    conf = os.path.join(tb, "slurm.conf")
    started = False
    if not _ping(conf):
        if os.geteuid() != 0 or shutil.which("apt-get") is None and shutil.which("slurmd") is None:
            pytest.skip("a local Slurm needs root (and apt-get to install it)")
        r = subprocess.run(["bash", UP], env={**os.environ, "SLURM_TB_DIR": tb},
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            pytest.fail(f"scripts/slurm/slurm-up.sh failed:\n{r.stdout}\n{r.stderr}")
        started = True
    env = {**os.environ, "SLURM_CONF": conf,
           "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    s = Slurm(conf, env)
    yield s
    if started:
        subprocess.run(["bash", DOWN], env={**os.environ, "SLURM_TB_DIR": tb},
                       capture_output=True, text=True, timeout=120)
