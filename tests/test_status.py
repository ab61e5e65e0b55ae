"""`shoal status --connect FILE` on a real head with real agents running real tasks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from shoal import Command, Executor
from tests.conftest import stop_procs
from tests.test_progress import plain, run_on_pty

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable


def status(connfile, *flags: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "shoal", "status", "--connect", str(connfile), *flags],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT, "COLUMNS": "200"})


def boom(x):
    raise ValueError(f"boom {x}")


def test_status_shows_agents_queue_counts_and_recent_failures(head):
    connfile, _proc, add_agent = head
    add_agent("--slots", "2", "--name", "a1", "--gpus", "2", "--memory", "4G")
    add_agent("--slots", "2", "--name", "a2")
    ex = Executor(connect=str(connfile), min_agents=2, start_timeout=30)
    try:
        bad = [ex.submit(Command("echo no >&2; exit 3")), ex.submit(boom, 7)]
        assert bad[0].result(30).returncode == 3
        with pytest.raises(ValueError):
            bad[1].result(30)
        # 4 slots: 4 sleeps run (one of them on a GPU of a1), a few more wait on the
        # agents (their windows), the rest in the head's queue; one waits on a sleep
        sleeps = [ex.options(gpus=1, memory="1G").submit(Command(["sleep", "8"]))]
        sleeps += [ex.submit(Command(["sleep", "8"])) for _ in range(39)]
        ex.options(after=[sleeps[0]]).submit(Command("true"))
        deadline = time.monotonic() + 20
        while ex.status(failures=0)["running"] < 4 and time.monotonic() < deadline:
            time.sleep(0.1)

        p = status(connfile, "--json")
        assert p.returncode == 0, p.stderr
        st = json.loads(p.stdout)
        agents = {a["name"]: a for a in st["agent_list"]}
        assert sorted(agents) == ["a1", "a2"]
        for a in agents.values():
            assert (a["slots"], a["busy"], a["running"]) == (2, 2, 2)
            assert a["queued"] >= 2  # prefetch 1 per slot at least
        assert (st["agents"], st["slots"], st["running"]) == (2, 4, 4)
        assert (agents["a1"]["gpus"], agents["a1"]["gpus_used"]) == (2, 1)
        assert (agents["a1"]["memory"], agents["a1"]["memory_used"]) == (4 << 30, 1 << 30)
        assert (agents["a2"]["gpus"], agents["a2"]["memory"]) == (0, 0)
        assert st["dispatched"] == sum(a["running"] + a["queued"] for a in agents.values())
        assert st["queue"] == {"ready": 40 - st["dispatched"], "waiting": 1, "backoff": 0}
        assert st["queue"]["ready"] > 0
        assert st["completed"] == 2 and st["failed"] == 2 and st["retried"] == 0
        fails = {f["why"]: f for f in st["failures"]}
        assert set(fails) == {"exit status 3", "ValueError: boom 7"}
        assert fails["exit status 3"]["task"] == "echo no >&2; exit 3"
        assert fails["ValueError: boom 7"]["task"] == "tests.test_status.boom"
        for f in fails.values():
            assert f["agent"] in ("a1", "a2") and f["attempt"] == 1 and not f["retried"]
            assert abs(f["time"] - time.time()) < 60

        p = status(connfile, "--failures", "1")  # the tables, for people
        assert p.returncode == 0, p.stderr
        assert "a1" in p.stdout and "a2" in p.stdout and "queued there" in p.stdout
        assert "recent failures" in p.stdout and "boom 7" in p.stdout
        assert "exit status 3" not in p.stdout  # only the newest one
        assert "4/4 cores busy, 1/2 GPUs busy" in p.stdout
        assert "1/2 " in p.stdout and "1.0G/4.0G" in p.stdout  # a1's GPUs and memory
        p = status(connfile, "--agents", "1", "--failures", "0")  # a big allocation's view
        assert p.returncode == 0, p.stderr
        assert ("a1" in p.stdout) != ("a2" in p.stdout)
        assert "and 1 more agent (0 of all 2 idle; --agents 0 lists all)" in p.stdout
    finally:
        ex.shutdown(wait=False, cancel_futures=True)


def test_a_lost_agent_and_a_retry_show_as_failed_attempts(tmp_path):
    connfile = tmp_path / "run.json"
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}
    head = subprocess.Popen([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                             "--connection-file", str(connfile), "--heartbeat-timeout", "1.5"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    procs = [head]
    try:
        deadline = time.monotonic() + 30
        while not connfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        doomed = subprocess.Popen([PY, "-m", "shoal", "agent", "--connect", str(connfile),
                                   "--slots", "1", "--name", "doomed"],
                                  stderr=subprocess.DEVNULL, env=env)
        procs.append(doomed)
        with Executor(connect=str(connfile), min_agents=1, start_timeout=30) as ex:
            fut = ex.options(retries=1).submit(Command("exit 5"))  # fails, retried, fails
            assert fut.result(30).returncode == 5
            lost = ex.submit(Command(["sleep", "30"]))
            deadline = time.monotonic() + 20
            while ex.status(failures=0)["running"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            doomed.send_signal(signal.SIGKILL)
            deadline = time.monotonic() + 20
            st = ex.status()
            while not st["lost_agents"] and time.monotonic() < deadline:
                time.sleep(0.1)
                st = ex.status()
            assert st["lost_agents"] == 1 and st["agents"] == 0
            whys = [(f["task"], f["why"], f["retried"], f["attempt"]) for f in st["failures"]]
            assert whys[:2] == [("exit 5", "exit status 5", True, 1),
                                ("exit 5", "exit status 5", False, 2)]
            assert whys[2][0] == "sleep 30" and whys[2][1].startswith("agent doomed was lost")
            assert whys[2][2] is True  # back in the queue: no agent left to run it
            assert (st["failed_attempts"], st["failed"], st["retried"]) == (3, 1, 2)
            assert st["queue"]["ready"] == 1 and st["running"] == 0
            lost.cancel()
            ex.shutdown(wait=False, cancel_futures=True)
    finally:
        stop_procs(procs)


def test_watch_redraws_on_a_terminal_until_ctrl_c(head):
    connfile, _proc, add_agent = head
    add_agent("--slots", "1", "--name", "w1")
    with Executor(connect=str(connfile), min_agents=1, start_timeout=30):
        rc, _out, term = run_on_pty([PY, "-m", "shoal", "status", "--connect", str(connfile),
                                     "--watch", "0.3"], stdout_pty=True, timeout=60,
                                    interrupt_when=lambda got: got.count(b"shoal head") >= 3)
    assert rc == 0, term[-2000:]
    text = plain(term)
    assert text.count("shoal head") >= 3, "redrawn, not printed once"
    assert "w1" in text and "no failed attempts" in text
    assert b"\x1b[" in term  # drawn in place (rich Live), not a scroll of copies


def test_watch_json_prints_one_object_per_line(head):
    connfile, _proc, add_agent = head
    add_agent("--slots", "1", "--name", "j1")
    with Executor(connect=str(connfile), min_agents=1, start_timeout=30):
        p = subprocess.Popen([PY, "-m", "shoal", "status", "--connect", str(connfile), "--watch",
                              "0.2", "--json"], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": ROOT})
        try:
            lines = [p.stdout.readline() for _ in range(3)]
        finally:
            p.send_signal(signal.SIGINT)
            assert p.wait(10) == 0
    states = [json.loads(line) for line in lines]
    assert [s["agent_list"][0]["name"] for s in states] == ["j1"] * 3
    assert states[0]["time"] < states[1]["time"] < states[2]["time"]


@pytest.mark.parametrize("flags,why", [
    (["--failures", "-1"], "--failures must be at least 0, not -1"),
    (["--watch", "0"], "--watch must be a number of seconds > 0, not 0"),
    (["--agents", "-2"], "--agents must be at least 0, not -2"),
])
def test_bad_flags_are_one_line(tmp_path, flags, why):
    p = status(tmp_path / "none.json", *flags)
    assert p.returncode == 2 and p.stderr.strip() == f"shoal status: {why}"


def test_missing_file_and_silent_head_are_one_line(tmp_path, head):
    p = status(tmp_path / "none.json")
    assert p.returncode == 2
    assert p.stderr.strip().startswith("shoal status: ") and "none.json" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    connfile, proc, _add_agent = head
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    t0 = time.monotonic()
    p = status(connfile, "--timeout", "1")
    assert p.returncode == 3 and time.monotonic() - t0 < 15
    assert p.stderr.strip().startswith("shoal status: no answer from the head at tcp://127.0.0.1:")
