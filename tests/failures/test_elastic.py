"""Elastic agents: SIGTERM drains an agent (nothing lost, nothing run twice); an agent
that joins mid-run gets work at once; past --drain-timeout running tasks are requeued."""

from __future__ import annotations

import time

from . import tasks
from .harness import Ledger, check_exactly_once, wait_for

TIMEOUT = 2.0
SLACK = 3.0


def test_sigterm_drains_and_a_new_agent_gets_work_at_once(make_cluster, tmp_path):
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    a = c.agent("el-a", slots=2)
    c.agent("el-b", slots=2)
    ex = c.executor()
    c.wait_agents(ex, 2)
    ledger = Ledger(str(tmp_path / "starts.txt"))
    n = 240
    futs = [ex.submit(tasks.record_start, i, str(ledger), 0.1) for i in range(n)]
    wait_for(lambda: sum(ln.split()[1] == str(a.pid) for ln in ledger.lines()) >= 10, 60, 0.02,
             "agent a to run 10 tasks")
    t_term = time.monotonic()
    a.term()
    rc = a.wait(30)
    assert rc == 0, f"a drained agent exits 0, not {rc}"
    assert time.monotonic() - t_term <= SLACK + 2, "draining took long for 0.1 s tasks"
    assert a.pid not in c.agent_pids(ex)
    assert len(ledger.lines()) < n - 40, "the run ended before a new agent could join"
    new = c.agent("el-c", slots=2)
    wait_for(lambda: new.pid in c.agent_pids(ex), 30, 0.05, "the new agent to join")
    t_join = time.time()
    results = [f.result(timeout=120) for f in futs]
    check_exactly_once(results, n)
    assert not ledger.twice(), f"tasks run twice across a drain: {ledger.twice()}"
    on_new = sorted(float(ln.split()[2]) for ln in ledger.lines() if ln.split()[1] == str(new.pid))
    assert on_new, "the agent that joined mid-run got no work"
    assert on_new[0] - t_join <= 2.0, f"first task on the new agent {on_new[0] - t_join:.1f} s after"


def test_drain_deadline_requeues_what_still_runs(make_cluster, tmp_path):
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    a = c.agent("dd-a", slots=1, extra=["--drain-timeout", "1"])
    ex = c.executor()
    c.wait_agents(ex, 1)
    ledger = Ledger(str(tmp_path / "starts.txt"))
    f = ex.submit(tasks.record_start, 0, str(ledger), 4.0)
    wait_for(lambda: ledger.lines(), 30, what="the long task to start")
    c.agent("dd-b", slots=1)
    wait_for(lambda: len(ex.agents()) == 2, 30, what="a second agent")
    a.term()
    assert a.wait(1 + SLACK + 5) == 0
    i, pid, _ = f.result(timeout=60)
    assert i == 0 and pid != a.pid, "the requeued task ran elsewhere"
    assert len(ledger.lines()) == 2


def test_walltime_leaves_in_order(make_cluster, tmp_path):
    # `--walltime 5 --drain-timeout 1`: the agent drains from 4 s on and is gone by 5 s
    # (+ slack), exit status 0; its work is finished or handed back, none run twice.
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    c.agent("wt-b", slots=2)
    ex = c.executor()
    c.wait_agents(ex, 1)
    ledger = Ledger(str(tmp_path / "starts.txt"))
    t_start = time.monotonic()
    a = c.agent("wt-a", slots=2, extra=["--walltime", "5", "--drain-timeout", "1"])
    wait_for(lambda: a.pid in c.agent_pids(ex), 30, 0.05, "agent a to join")
    n = 300
    futs = [ex.submit(tasks.record_start, i, str(ledger), 0.1) for i in range(n)]
    rc = a.wait(5 + SLACK + 10)
    took = time.monotonic() - t_start
    assert rc == 0, f"an agent at its walltime exits 0, not {rc}"
    assert took <= 5 + SLACK, f"left {took:.1f} s after it started (walltime 5 s)"
    check_exactly_once([f.result(timeout=120) for f in futs], n)
    assert not ledger.twice(), ledger.twice()
    assert any(ln.split()[1] == str(a.pid) for ln in ledger.lines()), "agent a got no work"
