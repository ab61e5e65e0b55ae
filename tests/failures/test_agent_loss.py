"""Agent loss: kill -9, SIGSTOP/SIGCONT, a network cut; seed 000's Figure 6 scenario.

Every test counts after the run: each task delivered exactly once (futures), each task run
at least once and re-run only where an attempt was lost (ledger), nothing left behind.
"""

from __future__ import annotations

import os
import time

import pytest

from . import tasks
from .harness import Ledger, check_exactly_once, free_port, wait_for

TIMEOUT = 2.0   # --heartbeat-timeout of these tests
SLACK = 3.0     # two busy cores, other suites running beside


def _progress(ledger: Ledger, n: int, timeout: float = 60.0) -> None:
    wait_for(lambda: len(ledger.lines()) >= n, timeout, 0.02, f"{n} tasks done")


def _results(futs, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    return [f.result(timeout=max(0.1, deadline - time.monotonic())) for f in futs]


def test_seed000_figure6_random_failures_and_an_agent_killed_halfway(make_cluster, tmp_path):
    # 18 slots over 6 agents, 10 % of attempts raise, retries=5, one agent (3 slots) kill -9
    # halfway: every task finishes, every result exactly once.
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    agents = [c.agent(f"fig6-{k}", slots=3) for k in range(6)]
    ex = c.executor(retries=5)
    c.wait_agents(ex, 6)
    ledger = Ledger(str(tmp_path / "ok.txt"))
    n = 540
    futs = [ex.submit(tasks.flaky, i, str(ledger), 0.05) for i in range(n)]
    _progress(ledger, n // 2)
    victim = agents[2]
    victim.kill()
    results = _results(futs, 180)
    check_exactly_once(results, n)
    runs = ledger.ids()
    assert set(runs) == set(range(n)), "some task never succeeded"
    # a success written by the killed agent's worker whose result was lost is run again:
    # at most its 3 slots' worth (plus what its workers held prefetched)
    assert len(ledger.twice()) <= 6, ledger.twice()
    assert not victim.alive()


@pytest.mark.parametrize("fault", ["kill9", "sigstop"])
def test_agent_lost_during_2000_tasks(make_cluster, tmp_path, fault):
    # kill -9 of one agent of three (or SIGSTOP for 2x the timeout, then SIGCONT) during
    # 2,000 short tasks: 2,000 results, no duplicates, no failures; a stopped agent that
    # comes back rejoins as a new agent and gets work.
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    agents = [c.agent(f"{fault}-{k}", slots=2) for k in range(3)]
    ex = c.executor()
    c.wait_agents(ex, 3)
    ledger = Ledger(str(tmp_path / "ran.txt"))
    n = 2000
    futs = [ex.submit(tasks.record, i, str(ledger), 0.01) for i in range(n)]
    _progress(ledger, n // 4)
    victim = agents[1]
    num_before = c.agent_numbers(ex)[victim.pid]
    if fault == "kill9":
        victim.kill()
    else:
        victim.stop()
        t_stop = time.monotonic()
        # declared lost: no longer listed (within the timeout + slack)
        wait_for(lambda: victim.pid not in c.agent_pids(ex), TIMEOUT + SLACK, 0.1,
                 "the stopped agent to be declared lost")
        time.sleep(max(0.0, 2 * TIMEOUT - (time.monotonic() - t_stop)))
        victim.cont()
    results = _results(futs, 180)
    check_exactly_once(results, n)
    runs = ledger.ids()
    assert set(runs) == set(range(n))
    # only the victim's attempts (2 slots, 1 prefetched each, what its workers held) re-ran
    assert len(ledger.twice()) <= 8, ledger.twice()
    if fault == "kill9":
        assert not victim.alive()
        return
    # the stopped agent rejoined, under a new number, and gets work again
    wait_for(lambda: victim.pid in c.agent_pids(ex), 30, 0.2, "the stopped agent to rejoin")
    num = c.agent_numbers(ex)[victim.pid]
    assert num != num_before, f"rejoined under its old number {num}"
    assert victim.alive(), "a stopped agent must rejoin, not exit"
    more = [ex.submit(tasks.record, n + i, str(ledger), 0.01) for i in range(600)]
    ran_on = {pid for _, pid in _results(more, 120)}
    assert victim.pid in ran_on, f"the rejoined agent got no work (num {num})"


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_network_cut_and_heal(netns, make_cluster, tmp_path):
    # An agent in its own network namespace; its link goes down past the timeout, then up:
    # its tasks run elsewhere meanwhile, every result exactly once, and it rejoins.
    ns = netns
    port = free_port(ns.host_ip)
    c = make_cluster(heartbeat_timeout=TIMEOUT, address=f"tcp://{ns.host_ip}:{port}")
    c.start_head()
    local = c.agent("host-agent", slots=2)
    far = c.agent("netns-agent", slots=2, netns=ns, extra=["--reconnect", "60"])
    ex = c.executor()
    c.wait_agents(ex, 2)
    ledger = Ledger(str(tmp_path / "ran.txt"))
    n = 1000
    futs = [ex.submit(tasks.record, i, str(ledger), 0.01) for i in range(n)]
    _progress(ledger, n // 5)
    ns.down()
    try:
        wait_for(lambda: far.pid not in c.agent_pids(ex), TIMEOUT + SLACK, 0.1,
                 "the cut-off agent to be declared lost")
        time.sleep(TIMEOUT)
    finally:
        ns.up()
    results = _results(futs, 180)
    check_exactly_once(results, n)
    assert set(ledger.ids()) == set(range(n))
    assert len(ledger.twice()) <= 8, ledger.twice()
    wait_for(lambda: far.pid in c.agent_pids(ex), 30, 0.2, "the healed agent to rejoin")
    more = [ex.submit(tasks.record, n + i, str(ledger), 0.01) for i in range(400)]
    assert far.pid in {pid for _, pid in _results(more, 120)}, "the healed agent got no work"
    assert local.alive()


def test_crash_limit_fails_a_task_that_kills_its_worker_naming_each_attempt(make_cluster,
                                                                           tmp_path):
    import shoal

    c = make_cluster(heartbeat_timeout=TIMEOUT, crash_limit=2)
    c.start_head()
    c.agent("cr-a", slots=1)
    c.agent("cr-b", slots=1)
    ex = c.executor()
    c.wait_agents(ex, 2)
    ledger = Ledger(str(tmp_path / "attempts.txt"))
    f = ex.submit(tasks.die, str(ledger))
    others = [ex.submit(tasks.inc, i) for i in range(50)]
    with pytest.raises(shoal.TaskLost) as info:
        f.result(timeout=60)
    assert len(ledger.lines()) == 2, "crash limit 2: exactly two attempts"
    exc = info.value  # the attempts: in the message, .attempts or the exception's notes
    text = "\n".join([str(exc), str(getattr(exc, "attempts", "") or ""),
                      *getattr(exc, "__notes__", [])])
    assert "attempt 1" in text and "attempt 2" in text, text
    assert [g.result(60) for g in others] == list(range(1, 51))
