"""`shoal head --expect-agents N`: the first dispatch waits for the allocation's agents."""

from __future__ import annotations

import os
import subprocess
import time

from shoal import Executor

from .conftest import PY, stop_procs


def agent_pid(_):
    time.sleep(0.05)
    return os.getppid()  # the worker's parent: its agent


def test_expect_agents_holds_dispatch_until_they_joined(tmp_path):
    connfile = tmp_path / "run.json"
    procs = [subprocess.Popen([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                               "--connection-file", str(connfile), "--expect-agents", "2",
                               "--expect-timeout", "60"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]

    def agent() -> subprocess.Popen:
        a = subprocess.Popen([PY, "-m", "shoal", "agent", "--connect", str(connfile), "--slots", "2"],
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
        procs.append(a)
        return a

    try:
        deadline = time.monotonic() + 30
        while not connfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        a1 = agent()
        with Executor(connect=str(connfile)) as ex:
            while ex.stats()["agents"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            futs = [ex.submit(agent_pid, i) for i in range(16)]
            time.sleep(1.0)
            assert not any(f.done() for f in futs)  # one agent of two: nothing dispatched yet
            assert ex.stats()["queued"] == 16
            a2 = agent()
            assert {f.result(60) for f in futs} == {a1.pid, a2.pid}  # spread over both
    finally:
        stop_procs(procs)
