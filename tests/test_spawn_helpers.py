"""Several spawn helpers per agent (shoal.agent.commands): commands start from each, and
however the cores move between them, no more run at once than the agent may use."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shoal import Command, Executor

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("helpers", ["", "1", "3"])
def test_commands_start_from_each_of_the_agents_helpers(tmp_path, helpers):
    # $PPID of a line run by the shell is the helper that started it
    tasks = tmp_path / "t.txt"
    tasks.write_text("echo $PPID\n" * 60)
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("SHOAL_SPAWN_HELPERS", None)
    if helpers:
        env["SHOAL_SPAWN_HELPERS"] = helpers
    out = subprocess.run([PY, "-m", "shoal", "run", str(tasks), "-j", "3", "--no-progress",
                          "--no-summary"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    parents = out.stdout.split()
    assert len(parents) == 60
    # by default one per CPU, at most the slots (3 here)
    want = int(helpers) if helpers else min(3, len(os.sched_getaffinity(0)))
    assert len(set(parents)) == want


def test_an_agent_with_python_workers_keeps_one_helper(monkeypatch):
    # each helper's fork is on the cold start's path, before the workers'
    monkeypatch.delenv("SHOAL_SPAWN_HELPERS", raising=False)
    with Executor(workers=1, slots=2) as ex:
        fs = [ex.submit(Command("echo $PPID")) for _ in range(20)]
        parents = {f.result(timeout=60).stdout.strip() for f in fs}
    assert len(parents) == 1


def _max_in_use(trace: str) -> int:
    """The most cores the attempts of a trace held at one moment (agent-measured start
    to end: a command from its spawn to its reap, a Python task from its call's start to
    its end)."""
    from shoal import trace as T

    edges = []
    for a in T.read(trace).attempts:
        assert a.status == "ok", a
        edges += [(a.started, a.cores), (a.ended, -a.cores)]
    edges.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


@pytest.mark.parametrize("helpers", ["1", "3"])
def test_never_more_cores_in_use_than_the_slots_across_helpers(tmp_path, monkeypatch, helpers):
    # short one-core commands (handed ahead of free cores, so the helpers' caps are what
    # holds them back), two-core commands (which the first helper takes, under a cap
    # raised for them) and Python tasks (whose cores the caps give up) all at once
    monkeypatch.setenv("SHOAL_SPAWN_HELPERS", helpers)
    slots = 3
    path = str(tmp_path / "run.trace")
    with Executor(workers=1, slots=slots, trace=path) as ex:
        fs = []
        for i in range(600):
            if i % 50 == 25:
                fs.append(ex.submit(Command(["/bin/true"], cores=2)))
            elif i % 40 == 13:
                fs.append(ex.submit(abs, -i))
            else:
                fs.append(ex.submit(Command(["/bin/true"])))
        for f in fs:
            r = f.result(timeout=120)
            assert isinstance(r, int) or r.returncode == 0, r
    assert _max_in_use(path) <= slots
