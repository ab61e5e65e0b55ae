"""Time limits: a command that ignores SIGTERM, a Python task stuck in C code holding the
GIL, the local default, retries of timed-out attempts, and `shoal run --timeout`."""

from __future__ import annotations

import time

import pytest

import shoal
from shoal import Command

from . import tasks
from .harness import PY, Ledger, check_exactly_once, pid_alive, wait_for

TIMEOUT = 2.0
SLACK = 3.0
GRACE = 3.0   # the agent's default --kill-grace


@pytest.fixture
def run(make_cluster):
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    c.agent("tl", slots=2)
    ex = c.executor()
    c.wait_agents(ex, 1)
    return c, ex


def test_command_ignoring_sigterm_is_killed_after_the_grace(run, tmp_path):
    c, ex = run
    pidfile = tmp_path / "sleep.pid"
    limit = 1.0
    t0 = time.monotonic()
    f = ex.options(timeout=limit).submit(
        Command(f"trap '' TERM; sleep 60 & echo $! > {pidfile}; wait; wait"))
    with pytest.raises(shoal.TaskTimeout) as info:
        f.result(timeout=limit + GRACE + SLACK + 10)
    took = time.monotonic() - t0
    assert isinstance(info.value, TimeoutError)
    assert limit + GRACE - 0.5 <= took <= limit + GRACE + SLACK, f"TaskTimeout after {took:.1f} s"
    sleeper = int(pidfile.read_text())
    wait_for(lambda: not pid_alive(sleeper), 5, what="the command's child to be killed")
    assert ex.submit(Command(["true"])).result(30).returncode == 0


def test_python_task_stuck_in_c_code(run, tmp_path):
    c, ex = run
    marker = str(tmp_path / "stuck.txt")
    ledger = Ledger(str(tmp_path / "others.txt"))
    limit = 1.5
    t0 = time.monotonic()
    stuck = ex.options(timeout=limit).submit(tasks.stuck_in_c, marker)
    others = [ex.submit(tasks.record, i, str(ledger), 0.02) for i in range(100)]
    with pytest.raises(shoal.TaskTimeout):
        stuck.result(timeout=limit + GRACE + SLACK + 10)
    took = time.monotonic() - t0
    assert took <= limit + GRACE + SLACK, f"TaskTimeout after {took:.1f} s"
    worker = int(Ledger(marker).lines()[0].split()[0])
    wait_for(lambda: not pid_alive(worker), 5, what="the stuck worker to be killed")
    check_exactly_once([f.result(60) for f in others], 100)
    assert not ledger.twice()
    # the next tasks still run, on both slots (the killed worker was replaced)
    assert [f.result(60) for f in [ex.submit(tasks.inc, i) for i in range(50)]] == \
        list(range(1, 51))
    assert worker not in {pid for pid, _ in
                          (f.result(60) for f in [ex.submit(tasks.where) for _ in range(20)])}


def test_timed_out_attempt_is_retried(run, tmp_path):
    c, ex = run
    ledger = str(tmp_path / "attempts.txt")
    f = ex.options(timeout=1.0, retries=1).submit(tasks.slow_first_time, ledger, 60)
    assert f.result(timeout=1.0 + GRACE + SLACK + 10) == 2
    assert len(Ledger(ledger).lines()) == 2


def test_local_default_task_timeout(tracker):
    t0 = time.monotonic()
    with shoal.Executor(workers=1, task_timeout=1.0) as ex:
        f = ex.submit(tasks.spin, "/dev/null")
        with pytest.raises(shoal.TaskTimeout):
            f.result(timeout=1.0 + GRACE + SLACK + 10)
        assert ex.submit(tasks.inc, 1).result(30) == 2
        g = ex.options(timeout=30).submit(tasks.inc, 2)  # a per-task limit overrides
        assert g.result(30) == 3
    assert time.monotonic() - t0 < 30, "`with Executor()` around an endless task hung"
    assert not tracker.leftovers(wait=5)


def test_shoal_run_timeout(make_cluster, tmp_path):
    c = make_cluster(heartbeat_timeout=None)
    taskfile = tmp_path / "t.txt"
    taskfile.write_text("trap '' TERM; sleep 60\n" + "".join(f"echo {i}\n" for i in range(5)))
    t0 = time.monotonic()
    p = c._start("client", "shoal-run", [PY, "-m", "shoal.cli.main", "run", str(taskfile),
                                         "-j", "2", "--timeout", "1", "--no-progress"])
    c.clients.append(p)
    rc = p.wait(60)
    out = p.output()
    assert rc == 1, out
    assert time.monotonic() - t0 <= 1 + GRACE + SLACK + 5, out
    assert sorted(ln for ln in out.splitlines() if ln.strip().isdigit()) == \
        [str(i) for i in range(5)], out
    assert "time" in out.lower(), out
