"""Head loss: kill -9 of the head fails the clients' futures with HeadLost within the
heartbeat timeout; its agents stop their tasks and exit with status 3; nothing is left."""

from __future__ import annotations

import time

import pytest

import shoal

from . import tasks
from .harness import PY, Ledger, descendants, wait_for

TIMEOUT = 2.0
SLACK = 3.0


def test_head_killed_clients_get_headlost_agents_exit_3(make_cluster, tracker, tmp_path):
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    agents = [c.agent(f"hl-{k}", slots=2) for k in range(2)]
    ex = c.executor()
    c.wait_agents(ex, 2)
    marker = str(tmp_path / "spin.txt")
    # pinned, two per agent: prefetch would otherwise queue some behind the others for ever
    running = [ex.options(agent=f"hl-{k % 2}").submit(tasks.spin, marker) for k in range(4)]
    queued = [ex.submit(tasks.inc, i) for i in range(100)]
    wait_for(lambda: len(Ledger(marker).lines()) >= 4, 30, what="4 endless tasks running")
    workers = set().union(*(descendants(a.pid) for a in agents))
    t0 = time.monotonic()
    c.head.kill()
    for f in running + queued:
        with pytest.raises(shoal.HeadLost):
            f.result(timeout=TIMEOUT + SLACK + 5)
    took = time.monotonic() - t0
    assert took <= TIMEOUT + SLACK, f"futures failed {took:.1f} s after the head died"
    assert "head" in str(running[0].exception()).lower()
    # a new submission fails at once, it does not hang
    with pytest.raises((shoal.HeadLost, shoal.ExecutorError, RuntimeError)):
        ex.submit(tasks.inc, 1).result(timeout=TIMEOUT + SLACK)
    for a in agents:
        rc = a.wait(TIMEOUT + SLACK + 5)
        assert rc == 3, f"agent {a.name} exited with status {rc}, not 3"
    assert time.monotonic() - t0 <= TIMEOUT + SLACK + 2
    left = tracker.leftovers(wait=SLACK)
    assert not (set(left) & workers), f"workers left behind: {left}"
    assert not left, f"processes left behind: {left}"


def test_head_lost_with_the_default_timeout_is_detected_within_10s(make_cluster, tracker):
    # the default timeout (8 s) keeps detection within the 10 s
    c = make_cluster(heartbeat_timeout=None)
    c.start_head()
    a = c.agent("hl-default", slots=1)
    ex = c.executor()
    c.wait_agents(ex, 1)
    f = ex.submit(time.sleep, 60)
    time.sleep(0.5)
    t0 = time.monotonic()
    c.head.kill()
    with pytest.raises(shoal.HeadLost):
        f.result(timeout=30)
    assert time.monotonic() - t0 <= 10 + SLACK
    assert a.wait(30) == 3
    assert time.monotonic() - t0 <= 10 + SLACK + 2



def test_shoal_run_exits_3_with_one_line_when_its_head_dies(make_cluster, tracker, tmp_path):
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    c.agent("hl-run", slots=2)
    ex = c.executor()
    c.wait_agents(ex, 1)
    taskfile = tmp_path / "tasks.txt"
    started = tmp_path / "started.txt"
    taskfile.write_text("".join(f"echo {i} >> {started}; sleep 30\n" for i in range(10)))
    run = c._start("client", "shoal-run", [PY, "-m", "shoal.cli.main", "run", str(taskfile),
                                           "--connect", c.connfile, "--no-progress",
                                           "--no-summary"])
    c.clients.append(run)
    wait_for(lambda: len(Ledger(str(started)).lines()) >= 2, 30, what="2 lines running")
    t0 = time.monotonic()
    c.head.kill()
    rc = run.wait(TIMEOUT + SLACK + 10)
    took = time.monotonic() - t0
    assert rc == 3, f"shoal run exited with {rc}:\n{run.output()}"
    assert took <= TIMEOUT + SLACK, f"shoal run exited {took:.1f} s after the head died"
    lines = [ln for ln in run.output().splitlines() if ln.strip()]
    assert lines and "head" in lines[-1].lower(), run.output()
    assert "Traceback" not in run.output(), run.output()
