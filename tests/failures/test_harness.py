"""The harness itself, on features main already has: a run, counting, leftovers, netns."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from . import tasks
from .harness import Ledger, check_exactly_once, descendants, free_port, kill_tree, pid_alive


def test_cluster_runs_counts_and_cleans_up(make_cluster, tracker, tmp_path):
    c = make_cluster(heartbeat_timeout=None)
    c.start_head()
    a = c.agent("h-a", slots=2)
    c.agent("h-b", slots=1)
    ex = c.executor()
    names = {i.name for i in c.wait_agents(ex, 2)}
    assert names == {"h-a", "h-b"}
    ledger = Ledger(str(tmp_path / "l.txt"))
    results = [f.result(60) for f in [ex.submit(tasks.record, i, str(ledger)) for i in range(200)]]
    check_exactly_once(results, 200)
    assert sorted(ledger.ids()) == list(range(200)) and not ledger.twice()
    assert {pid for _, pid in results} <= c.agent_pids(ex)
    workers = descendants(a.pid)
    assert workers and set(tracker.leftovers()) >= workers | {a.pid}
    c.close()
    assert not tracker.leftovers(wait=5)


def test_tracker_sees_orphans(tracker):
    # a grandchild whose parent exits stays visible (subreaper) and is reported, then killed
    p = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE, text=True)
    tracker.own(p)
    orphan = int(p.stdout.readline())
    p.wait(10)
    time.sleep(0.3)
    assert orphan in tracker.leftovers()
    assert orphan in tracker.kill_leftovers()
    assert not pid_alive(orphan)


def test_kill_tree_takes_what_starts_meanwhile(tracker):
    # a parent starting processes all the time (an agent launching commands): one started
    # between the listing of the tree and the parent's stop must be killed too
    p = tracker.own(subprocess.Popen(["sh", "-c", "while :; do sleep 30 & sleep 0.005; done"]))
    time.sleep(0.3)
    killed = kill_tree(p.pid)
    assert p.wait(10) == -9 and killed[0] == p.pid and len(killed) > 10
    assert not tracker.leftovers(wait=5)


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_agent_in_a_network_namespace(netns, make_cluster, tmp_path):
    port = free_port(netns.host_ip)
    c = make_cluster(heartbeat_timeout=None, address=f"tcp://{netns.host_ip}:{port}")
    c.start_head()
    far = c.agent("ns-agent", slots=1, netns=netns)
    ex = c.executor()
    c.wait_agents(ex, 1)
    assert far.pid in netns.pids()
    assert ex.submit(tasks.where).result(60)[1] == far.pid
