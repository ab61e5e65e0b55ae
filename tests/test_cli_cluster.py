"""The command line, several agents on one machine, authentication, no orphans."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import zmq

from shoal import Executor
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection

from .conftest import PY, ROOT, pid_alive, session_pids, shoal_pids, wait_gone
from .failures.harness import descendants


def run(args, **kw):
    return subprocess.run([PY, "-m", "shoal", *args], capture_output=True, text=True,
                          cwd=kw.pop("cwd", ROOT), timeout=kw.pop("timeout", 120), **kw)


def test_shoal_run_taskfile(tmp_path):
    tasks = tmp_path / "tasks.txt"
    tasks.write_text(
        "echo one\n# a comment\n\necho two >&2\nexit 3\necho 'unbalanced\n"
        "no-such-program-xyz\necho con\\\ntinued\n"
    )
    r = run(["run", "-j", "2", str(tasks)])
    assert r.returncode == 1
    assert set(r.stdout.split()) == {"one", "continued"}
    assert "two" in r.stderr
    assert "tasks.txt:6: cannot parse" in r.stderr  # the bad line, named; the rest ran
    summary = r.stderr[r.stderr.index("shoal run summary"):]
    assert "│     5 │         3 │      2 │             1 │" in summary
    assert "exit status 3" in summary and "exit status 127" in summary


def test_shoal_run_output_dir_and_success(tmp_path):
    tasks = tmp_path / "t.txt"
    tasks.write_text("".join(f"echo task {i}\n" for i in range(20)))
    r = run(["run", "-j", "4", "--output-dir", str(tmp_path / "out"), "--no-summary", str(tasks)])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "7.out").read_text() == "task 6\n"
    assert (tmp_path / "out" / "7.err").read_text() == ""


def test_shoal_run_missing_file():
    r = run(["run", "/nonexistent/tasks.txt"])
    assert r.returncode == 2 and "cannot read task file '/nonexistent/tasks.txt'" in r.stderr


def test_python_m_shoal_runs_unmodified_programs():
    r = run(["-n", "2", "examples/pi.py", "50", "2000"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("pi ~= 3.1")
    r = run(["-n", "2", "examples/tree.py", "10"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "tree(10) = 1024 leaves"


def test_program_exception_shows_remote_traceback(tmp_path):
    prog = tmp_path / "bad.py"
    prog.write_text(
        "from shoal import futures\n"
        "def f(x):\n    return 1 / x\n"
        "if __name__ == '__main__':\n    print(list(futures.map(f, [1, 0])))\n"
    )
    r = run(["-n", "1", str(prog)])
    assert r.returncode != 0
    assert "ZeroDivisionError" in r.stderr and "return 1 / x" in r.stderr


def agent_pid(_):
    time.sleep(0.05)
    return os.getppid()  # the worker's parent: its agent


def test_manual_head_and_two_agents(head):
    connfile, proc, add_agent = head
    assert stat.S_IMODE(os.stat(connfile).st_mode) == 0o600
    a1, a2 = add_agent("--slots", "2"), add_agent("--slots", "2")
    with Executor(connect=str(connfile)) as ex:
        deadline = time.monotonic() + 30
        while ex.stats()["agents"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ex.stats()["slots"] == 4
        parents = set(ex.map(agent_pid, range(40), chunksize=1))
    assert parents == {a1.pid, a2.pid}


def test_agents_listing_and_placement(head):
    connfile, proc, add_agent = head
    a1, a2 = add_agent("--slots", "2"), add_agent("--slots", "2")
    with Executor(connect=str(connfile)) as ex:
        deadline = time.monotonic() + 30
        while len(ex.agents()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        infos = ex.agents()
        assert {i.pid for i in infos} == {a1.pid, a2.pid}
        assert all(i.slots == 2 and i.host for i in infos)
        by_pid = {i.pid: i.name for i in infos}
        target = by_pid[a2.pid]
        pinned = [ex.options(agent=target).submit(agent_pid, i) for i in range(12)]
        assert {f.result() for f in pinned} == {a2.pid}
        assert {f.agent for f in pinned} == {target}
        # a soft preference runs where asked while that agent has room
        pref = ex.options(prefer=by_pid[a1.pid]).submit(agent_pid, 0)
        assert pref.result() == a1.pid and pref.agent == by_pid[a1.pid]
        # any task reports where it ran, also to a done callback
        seen = []
        f = ex.submit(agent_pid, 0)
        f.add_done_callback(lambda fut: seen.append(fut.agent))
        assert by_pid[f.result()] == f.agent
        assert seen == [f.agent]
        bad = ex.options(agent="no-such-agent").submit(agent_pid, 0)
        with pytest.raises(Exception, match="no agent named 'no-such-agent'"):
            bad.result(30)


def worker_pid(_):
    time.sleep(0.05)
    return os.getpid()


def test_killed_agent_takes_its_workers_along(head):
    connfile, proc, add_agent = head
    a = add_agent("--slots", "2")
    with Executor(connect=str(connfile)) as ex:
        workers = set(ex.map(worker_pid, range(8), chunksize=1))
        assert workers and a.pid not in workers
        a.kill()  # SIGKILL: no chance to stop its workers in order
        a.wait()
        deadline = time.monotonic() + 15
        while any(pid_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_alive(w) for w in workers)



def test_unauthenticated_messages_are_dropped(head):
    connfile, proc, add_agent = head
    add_agent("--slots", "1")
    conn = Connection.read(str(connfile))
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.connect(conn.address)
    forged = P.Codec(b"x" * 32).encode([P.HELLO, "client", {}])
    s.send_multipart(forged)                     # wrong key
    s.send_multipart([b"junk"])                  # malformed
    assert s.poll(500) == 0                      # no answer to either
    s.close(0)
    ctx.term()
    with Executor(connect=str(connfile)) as ex:  # the run goes on
        assert ex.submit(pow, 2, 10).result(timeout=30) == 1024
        assert ex.stats()["bad_messages"] == 2
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    assert "failed authentication" in proc.stderr.read()


def test_bad_connection_file(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"address": "tcp://127.0.0.1:1"}))
    with pytest.raises(ValueError, match="lacks run_id, secret"):
        Executor(connect=str(p))


def test_caller_crash_leaves_no_processes():
    # Only this caller's runtime is watched (the sessions its head and agent lead, workers
    # included): a machine-wide "new shoal processes" list also held other test runs'.
    code = (
        "import os, sys, time\nfrom shoal import Executor\nex = Executor(workers=2)\n"
        "fs = [ex.submit(time.sleep, 5) for _ in range(4)]\ntime.sleep(0.5)\n"
        "c = ex._cluster\nprint(c.rundir, c.head.pid, c.agent.pid, flush=True)\n"
        "sys.stdin.read()\nos._exit(1)\n"
    )
    p = subprocess.Popen([PY, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        rundir, head, agent = p.stdout.readline().split()
        sids = {int(head), int(agent)}
        mine = session_pids(sids)
        assert sids <= mine, f"head and agent not running: {mine}"
    finally:
        p.stdin.close()  # the caller crashes now
        assert p.wait(60) == 1
    # a worker forked after the listing is in the agent's session too
    assert not wait_gone(mine | session_pids(sids), 10), "runtime processes outlived their caller"
    assert not session_pids(sids), "runtime processes outlived their caller"
    assert rundir and not os.path.exists(rundir), "the run directory outlived its caller"


def test_ctrl_c_stops_everything(tmp_path):
    prog = tmp_path / "long.py"
    prog.write_text(
        "import time\nfrom shoal import futures\n"
        "if __name__ == '__main__':\n"
        "    print('started', flush=True)\n    list(futures.map(time.sleep, [30] * 8))\n"
    )
    p = subprocess.Popen([PY, "-m", "shoal", "-n", "2", str(prog)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().strip() == "started"
    time.sleep(0.5)
    mine = shoal_pids() & descendants(p.pid)  # not other test runs' on this machine
    assert mine
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    assert p.wait(20) == 130
    assert not wait_gone(mine, 10), "runtime processes survived Ctrl-C"
    assert not sys.exc_info()[0]
