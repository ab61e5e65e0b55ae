"""Shared fixtures: bundles of this very venv (tiers 1-3), built once per session; real
`shoal head` and `shoal agent` processes (``runtime``), stopped by PID."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from shoal.bundle import build, unpack_bundles
from tests.conftest import pid_alive

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


@pytest.fixture(scope="session")
def runtime_cls():
    """The ``Runtime`` class, for fixtures of a wider scope than ``runtime``."""
    return Runtime


@pytest.fixture()
def runtime(tmp_path):
    """``with runtime(head_args=[...]) as rt: rt.agent(...)``: a real head and agents."""
    made: list[Runtime] = []

    def make(head_args=(), cwd=None, tmp=None) -> Runtime:
        rt = Runtime(tmp or tmp_path, head_args, cwd)
        made.append(rt)
        return rt

    yield make
    for rt in made:  # in case a test left its block abnormally
        rt.__exit__(None, None, None)


class Runtime:
    """``with Runtime(tmp) as rt: rt.agent(...); rt.wait_agents(n)``; everything it started
    is stopped (SIGTERM, then SIGKILL) when the block ends. Logs go to files in ``tmp``."""

    def __init__(self, tmp: Path, head_args: list[str] | tuple[str, ...] = (), cwd: Path | None = None) -> None:
        self.tmp = Path(tmp)
        self.cwd = cwd or self.tmp
        self.connfile = self.tmp / "run.json"
        self.head_args = list(head_args)
        self.head: subprocess.Popen | None = None
        self.agents: list[subprocess.Popen] = []
        self._logs: list = []

    def _start(self, args: list[str], log: str, env: dict[str, str] | None = None,
               python: str | None = None) -> subprocess.Popen:
        fh = open(self.tmp / log, "w")
        self._logs.append(fh)
        return subprocess.Popen([python or sys.executable, "-m", "shoal", *args], stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.cwd, env=env)

    def __enter__(self) -> Runtime:
        self.head = self._start(["head", "--bind", "tcp://127.0.0.1:0", "--connection-file",
                                 str(self.connfile), *self.head_args], "head.log")
        deadline = time.monotonic() + 60
        while not self.connfile.exists():
            if self.head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"head did not start: {self.log('head')}")
            time.sleep(0.05)
        return self

    def agent(self, *args: str, env: dict[str, str] | None = None, python: str | None = None) -> subprocess.Popen:
        a = self._start(["agent", "--connect", str(self.connfile), *args], f"agent{len(self.agents)}.log", env,
                        python)
        self.agents.append(a)
        return a

    def log(self, name: str) -> str:
        p = self.tmp / f"{name}.log"
        return p.read_text() if p.exists() else ""

    def wait_agents(self, n: int, timeout: float = 60.0) -> None:
        """Until the head has logged ``n`` agents joining."""
        deadline = time.monotonic() + timeout
        while self.log("head").count(" joined with ") < n:
            dead = [i for i, a in enumerate(self.agents) if a.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(self.log(f"agent{i}") for i in dead)
                raise RuntimeError(f"agents did not join: {self.log('head')}\n{logs}")
            time.sleep(0.05)

    def stop_agent(self, a: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        a.send_signal(sig)
        a.wait(20)

    def __exit__(self, *exc: object) -> None:
        procs = [*self.agents, *([self.head] if self.head else [])]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for fh in self._logs:
            fh.close()

    def leftovers(self, pids: set[int] | None = None, timeout: float = 10.0) -> set[int]:
        """Which of ``pids`` (and of the processes started here) are still alive."""
        left = set(pids or ()) | {p.pid for p in [*self.agents, self.head] if p}
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            left = {p for p in left if pid_alive(p)}
            time.sleep(0.05)
        return left
