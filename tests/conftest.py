from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from shoal import Executor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable


@pytest.fixture(scope="module")
def ex():
    with Executor(workers=2) as executor:
        yield executor


@contextlib.contextmanager
def running_head(tmp_path, *flags: str):
    """`shoal head FLAGS` on loopback TCP; yields (connfile, head process, add_agent(*flags)).
    Every process it started is stopped at the end."""
    connfile = tmp_path / "run.json"
    proc = subprocess.Popen([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                             "--connection-file", str(connfile), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not connfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    agents: list[subprocess.Popen] = []

    def add_agent(*flags: str) -> subprocess.Popen:
        # its scratch under tmp_path: an agent a test kills cannot remove it itself
        a = subprocess.Popen([PY, "-m", "shoal", "agent", "--connect", str(connfile), *flags],
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
        agents.append(a)
        return a

    try:
        yield connfile, proc, add_agent
    finally:
        stop_procs([*agents, proc])


@pytest.fixture
def head(tmp_path):
    """`shoal head` on loopback TCP (:func:`running_head` with no flags)."""
    with running_head(tmp_path) as h:
        yield h


def shoal_pids() -> set[int]:
    """PIDs of shoal head/agent processes (and their workers) on this machine."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    pids = set()
    for line in out.splitlines():
        pid, _, args = line.strip().partition(" ")
        if "-m shoal.head" in args or "-m shoal.agent" in args:
            pids.add(int(pid))
    return pids


def session_pids(sids: set[int]) -> set[int]:
    """Live PIDs whose session is one of ``sids`` (the local runtime's head and agent each
    lead a session of their own, which their workers share): this run's processes only,
    not those of another test run on the same machine."""
    out = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if rest[0] != "Z" and int(rest[3]) in sids:
            out.add(int(name))
    return out


def wait_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    deadline = time.monotonic() + timeout
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {p for p in left if pid_alive(p)}
        time.sleep(0.05)
    return left


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped between open and read
        return False


def stop_procs(procs: list, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Send ``sig`` to each process still running (in the order given), then wait for each,
    SIGKILLing one that outlives ``timeout``."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture(params=["compiled", "python"])
def spawn_path(request, monkeypatch):
    """Run a test with the spawn helper's compiled per-command path (shoal.agent._spawnc)
    and with its pure-Python fallback (SHOAL_NO_CSPAWN=1): in this process and in every
    spawn helper started from it (the helper reads the variable when it starts)."""
    from shoal.agent import launcher

    if request.param == "compiled":
        if launcher._spawnc is None:
            pytest.skip("shoal.agent._spawnc is not built")
        monkeypatch.delenv("SHOAL_NO_CSPAWN", raising=False)
    else:
        monkeypatch.setenv("SHOAL_NO_CSPAWN", "1")
    launcher.use_compiled()
    yield request.param
    monkeypatch.undo()
    launcher.use_compiled()
