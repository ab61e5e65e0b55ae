"""Placement of clusters: a cluster goes to the agent that wrote its inputs (several real
agents), and memory scratch when the agents do not share one /dev/shm."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from script_helpers import run_bash, run_shoal, shm_leftovers, snapshot

from shoal import Executor
from shoal.script.compiler import CompileOptions, compile_source
from shoal.script.runner import RunOptions, run_plan

# per i: a producer chain (sleep, then write a_i, then a first reader of a_i) and a second
# reader of a_i, which chain clustering puts in a cluster of its own; a_i is an intermediate
FAN = """#!/bin/bash
for i in 1 2 3 4 5 6; do
  sleep 0.$((i + 3)) && cp in_$i.txt a_$i.txt
  cat a_$i.txt > b_$i.txt
  sort a_$i.txt > c_$i.txt
done
cat c_*.txt > all.txt
rm a_*.txt
"""


def _inputs(d: Path) -> None:
    for i in range(1, 7):
        (d / f"in_{i}.txt").write_text(f"line {i}\nzz {i}\n")


@pytest.fixture
def agents(tmp_path: Path):
    """A head and three agents of 2 slots on this machine; yields the connection file.

    ``--prefetch 0``: an agent is given no more tasks than it has slots, so the six producers
    spread over the agents, and an agent has a free slot whenever one of its producers ends
    (slots allow: a preferred cluster never has to be taken by another agent)."""
    conn = tmp_path / "run.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-m", "shoal", "head", "--bind",
                               "tcp://127.0.0.1:0", "--connection-file", str(conn),
                              "--prefetch", "0"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)]
    try:
        deadline = time.monotonic() + 30
        while not conn.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for k in range(3):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "shoal", "agent", "--connect", str(conn), "--slots", "2",
                 "--name", f"node{k}"], env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE))
        with Executor(connect=str(conn)) as ex:
            while len(ex.agents()) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(ex.agents()) == 3
        yield str(conn)
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_clusters_follow_the_agent_that_wrote_their_inputs(tmp_path: Path, agents: str) -> None:
    ref, run = tmp_path / "bash", tmp_path / "shoal"
    for d in (ref, run):
        d.mkdir()
        _inputs(d)
        (d / "job.sh").write_text(FAN)
    assert run_bash(ref, "job.sh").returncode == 0
    plan = compile_source(FAN.encode(), "job.sh", [], CompileOptions(cwd=str(run)))
    # six second readers of a_i sit in clusters of their own, fed by the producers' clusters
    cluster_of = {v: c.id for c in plan.clusters for v in c.steps}
    sorts = [s.id for s in plan.steps if s.programs == ["sort"]]
    feeders = {cluster_of[s]: cluster_of[s - 1] for s in sorts}
    assert len(feeders) == 6 and all(c != p for c, p in feeders.items())
    with open(os.devnull, "w") as null:
        report = run_plan(plan, str(run), RunOptions(connect=agents, stdout=null, stderr=null))
    assert report.exit_code == 0, report.status
    assert report.shm_scope == "shared"  # all agents on this host: one /dev/shm
    # each reader preferred the agent its producer ran on, and ran there (slots allowed it)
    assert set(report.preferred) >= set(feeders)
    for c, p in feeders.items():
        assert report.preferred[c] == report.agent_of[p], (c, p, report.agent_of)
        assert report.agent_of[c] == report.agent_of[p], (c, p, report.agent_of)
    assert set(report.agent_of.values()) <= {"node0", "node1", "node2"}
    assert len({report.agent_of[p] for p in feeders.values()}) >= 2  # producers spread out
    # and the run leaves bash's files
    sa, sb = snapshot(ref), snapshot(run)
    assert sa == sb
    assert not shm_leftovers(os.getpid())
    # the same through the command line
    cli = tmp_path / "cli"
    cli.mkdir()
    _inputs(cli)
    (cli / "job.sh").write_text(FAN)
    r = run_shoal(cli, "job.sh", extra=("--connect", agents, "--timings"))
    assert r.returncode == 0, r.stderr
    assert "locality: 7 of 7 clusters with inputs from other clusters ran on the agent" \
        in r.stderr
    assert snapshot(cli) == sa


@pytest.mark.parametrize("backend", ["threads", "shoal"])
def test_node_local_memory_scratch_keeps_shared_files_on_disk(tmp_path: Path,
                                                              backend: str) -> None:
    # what happens when the agents are on several hosts (forced here): only intermediates
    # used inside one cluster go to memory, in a directory the chain makes and removes
    ref, run = tmp_path / "bash", tmp_path / "shoal"
    for d in (ref, run):
        d.mkdir()
        _inputs(d)
        (d / "job.sh").write_text(FAN + "cp b_1.txt t.txt\nsort t.txt > u.txt\nrm t.txt\n")
    src = (run / "job.sh").read_text()
    assert run_bash(ref, "job.sh").returncode == 0
    plan = compile_source(src.encode(), "job.sh", [], CompileOptions(cwd=str(run)))
    with open(os.devnull, "w") as null:
        report = run_plan(plan, str(run), RunOptions(backend=backend, workers=2,
                                                     shm_scope="cluster", stdout=null,
                                                     stderr=null))
    assert report.exit_code == 0, report.status
    assert report.shm_scope == "cluster"
    # a_i (read by two clusters) on disk; t.txt (inside the last chain) in memory
    assert report.scratch_disk == 6 and report.scratch_shm == 1
    assert snapshot(ref) == snapshot(run)
    assert not shm_leftovers(os.getpid())


def test_ctrl_c_removes_node_local_memory_scratch_on_the_agents(tmp_path: Path, agents: str,
                                                                 monkeypatch) -> None:
    # a chain killed on another node cannot remove its memory directory: the runner sends a
    # clean-up command to every agent. Here the client's own clean-up of those directories
    # is turned off, so what is left would be what a remote node keeps.
    import _thread
    import threading

    from shoal.script import runner

    monkeypatch.setattr(runner._Layout, "remove", lambda self, keep_run_dir=False:
                        runner.shutil.rmtree(self.root, ignore_errors=True))
    (tmp_path / "in.txt").write_text("x\n")
    src = "cp in.txt t.txt && sleep 30 && sort t.txt > u.txt\nrm t.txt\n"
    plan = compile_source(src.encode(), "job.sh", [], CompileOptions(cwd=str(tmp_path)))
    timer = threading.Timer(3.0, _thread.interrupt_main)
    timer.start()
    t0 = time.monotonic()
    try:
        with open(os.devnull, "w") as null:
            report = run_plan(plan, str(tmp_path), RunOptions(
                connect=agents, shm_scope="cluster", stdout=null, stderr=null))
    finally:
        timer.cancel()
    assert report.interrupted and report.exit_code == 130
    assert time.monotonic() - t0 < 20
    assert report.scratch_shm == 1  # t.txt, inside the one chain
    assert not shm_leftovers(os.getpid())
