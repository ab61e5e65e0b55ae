"""The run journal: the Journal class on its own, then a real head, agent and client,
including kill -9 of the head mid-run and a restart on the same journal."""

from __future__ import annotations

import os
import pickle
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from typing import Any

import pytest
import zmq

from shoal.head.journal import Journal, JournalError, summary
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection
from shoal.transport.session import PeerSession

from .conftest import PY, ROOT

# ---- the Journal class -----------------------------------------------------------------


def test_fresh_journal_then_resume(tmp_path):
    path = str(tmp_path / "run.db")
    j = Journal(path)
    assert (j.run, j.resumable) == (1, 0)
    assert j.lookup(["a"]) == {}  # nothing earlier: no lookup at all
    j.submitted(["a", "b", "c"])
    j.finished([("a", P.OK, b"result-a"), ("b", P.ERR, b"traceback"), ("c", P.LOST, b"lost")])
    j.commit()
    assert not j.pending
    j.close()

    j = Journal(path)
    assert (j.run, j.resumable) == (2, 1)
    # only the OK result comes back; failed tasks run again
    assert j.lookup(["a", "b", "c", "never"]) == {"a": b"result-a"}
    j.submitted(["b", "c"])
    j.finished([("b", P.OK, b"result-b"), ("c", P.ERR, b"again")])
    j.answered(1)
    j.commit()
    # this run's own results are not answers for this run (only earlier runs count)
    assert j.lookup(["b"]) == {}
    j.close()

    j = Journal(path)
    assert j.run == 3
    assert j.lookup(["a", "b", "c"]) == {"a": b"result-a", "b": b"result-b"}
    summary = j.summary()
    j.close()
    assert [(r["run"], r["submitted"], r["ok"], r["failed"], r["reused"]) for r in summary] == [
        (1, 3, 1, 2, 0), (2, 2, 1, 1, 1), (3, 0, 0, 0, 0)]
    assert all(r["ended"] >= r["started"] for r in summary[:2])


def test_lookup_many_keys_in_chunks(tmp_path):
    path = str(tmp_path / "run.db")
    j = Journal(path)
    keys = [f"k{i}" for i in range(2345)]
    j.finished([(k, P.OK, k.encode()) for k in keys[::2]])
    j.commit()
    j.close()
    j = Journal(path)
    found = j.lookup(keys)
    j.close()
    assert found == {k: k.encode() for k in keys[::2]}


def test_ok_result_is_kept_when_a_later_run_fails_the_same_key(tmp_path):
    # a key given with options(key=...) twice: the OK result stays the answer
    path = str(tmp_path / "run.db")
    j = Journal(path)
    j.finished([("k", P.OK, b"first"), ("k", P.ERR, b"boom")])
    j.commit()
    j.close()
    j = Journal(path)
    assert j.lookup(["k"]) == {"k": b"first"}
    j.close()


def test_not_a_journal(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not SQLite at all\n" * 100)
    with pytest.raises(JournalError, match=r"notes.txt' is not a shoal journal \(not an SQLite"):
        Journal(str(text))
    with pytest.raises(JournalError, match=r"notes.txt' is not a shoal journal \(not an SQLite"):
        summary(str(text))
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE t(x)")
    with pytest.raises(JournalError, match=r"other.db' is not a shoal journal \(an SQLite file"):
        Journal(str(other))
    newer = tmp_path / "newer.db"
    Journal(str(newer)).close()
    with closing(sqlite3.connect(newer)) as db:
        db.execute("PRAGMA user_version=99")
    with pytest.raises(JournalError, match="newer.db' has format 99, newer than this shoal"):
        Journal(str(newer))
    with pytest.raises(JournalError, match="cannot open journal .*no-such-dir/run.db"):
        Journal(str(tmp_path / "no-such-dir" / "run.db"))


def test_one_head_per_journal(tmp_path):
    path = str(tmp_path / "run.db")
    j = Journal(path)
    with pytest.raises(JournalError, match=r"is in use by another shoal head \(still after 0.5 s"):
        Journal(path, lock_wait=0.5)
    j.close()
    Journal(path).close()  # free again once the first closed


_KILLED_WRITER = """
import os, signal, sys
from shoal.head.journal import Journal
j = Journal(sys.argv[1])
j.submitted(["a", "b"])
j.finished([("a", 0, b"A"), ("b", 0, b"B")])
j.commit()                       # one transaction: both rows
j.finished([("c", 0, b"C")])     # buffered, never committed
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_kill_9_keeps_every_commit_and_nothing_else(tmp_path):
    path = str(tmp_path / "run.db")
    r = subprocess.run([PY, "-c", _KILLED_WRITER, path], cwd=ROOT, timeout=60)
    assert r.returncode == -signal.SIGKILL
    assert os.path.exists(path + "-wal")  # the commit sits in the WAL, not yet checkpointed
    j = Journal(path)
    assert j.run == 2
    assert j.lookup(["a", "b", "c"]) == {"a": b"A", "b": b"B"}
    j.close()


def test_full_disk_is_a_clear_error(tmp_path):
    path = str(tmp_path / "run.db")
    j = Journal(path)
    pages = j.db.execute("PRAGMA page_count").fetchone()[0]
    j.db.execute(f"PRAGMA max_page_count={pages + 2}")  # SQLite's own "disk is full"
    j.finished([(f"k{i}", P.OK, b"x" * 4000) for i in range(20)])
    with pytest.raises(JournalError, match="run.db': cannot write: database or disk is full"):
        j.commit()
    j.close()


# ---- a real head, agent and client ----------------------------------------------------


class RawClient:
    """A client speaking the wire protocol directly (HELLO, SUBMIT, RESULTS, STATS)."""

    def __init__(self, conn: Connection) -> None:
        self.codec = PeerSession(conn.key)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(conn.address)
        self.send([P.HELLO, "client", {}])
        welcome = self.recv(P.WELCOME, 30)
        self.welcome: dict[str, Any] = welcome[1]
        self.origin = welcome[1]["origin"] << 32
        self.seq = 0
        self.results: dict[int, list[Any]] = {}
        self.duplicates = 0

    def send(self, msg: list[Any]) -> None:
        self.sock.send_multipart(self.codec.encode(msg))

    def recv(self, kind: int, timeout: float) -> list[Any]:
        """The next message of ``kind``; results met on the way are collected."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.sock.poll(500):
                self.send([P.HEARTBEAT])
                continue
            msg = self.codec.decode(*self.sock.recv_multipart())
            if msg[0] == P.RESULTS:
                for item in msg[1]:
                    self.duplicates += item[0] in self.results
                    self.results[item[0]] = item
            if msg[0] == kind:
                return msg
        raise TimeoutError(f"no message of kind {kind} in {timeout} s")

    def drain(self) -> None:
        """Collect the results already received (the head may be gone)."""
        while self.sock.poll(300):
            msg = self.codec.decode(*self.sock.recv_multipart())
            if msg[0] == P.RESULTS:
                for item in msg[1]:
                    self.duplicates += item[0] in self.results
                    self.results[item[0]] = item

    def command(self, shell: str, key: str, deps: list[int] | None = None) -> list[Any]:
        self.seq += 1
        return [self.origin | self.seq, P.CMD, 0, {"argv": ["/bin/sh", "-c", shell]},
                deps or [], 1, -1, None, {"key": key}]

    def submit(self, specs: list[list[Any]]) -> None:
        self.send([P.SUBMIT, specs, {}, 0])

    def wait_results(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.results) < n:
            self.recv(P.RESULTS, max(0.1, deadline - time.monotonic()))

    def stats(self) -> dict[str, Any]:
        self.send([P.STATS, 7])
        return self.recv(P.STATS, 30)[2]

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


class Run:
    """Head + agent processes on one connection file; every process is stopped at the end."""

    def __init__(self, tmp_path) -> None:
        self.tmp = tmp_path
        self.procs: list[subprocess.Popen] = []
        self.n = 0

    def head(self, journal: str, **popen: Any) -> tuple[Connection, subprocess.Popen]:
        self.n += 1
        connfile = str(self.tmp / f"c{self.n}.json")
        conn = Connection.new(f"ipc://{self.tmp}/h{self.n}")
        conn.write(connfile)
        proc = subprocess.Popen([PY, "-m", "shoal.head", "--connection", connfile,
                                 "--journal", journal], stderr=subprocess.PIPE, text=True,
                                cwd=ROOT, **popen)
        self.procs.append(proc)
        return conn, proc

    def agent(self, conn: Connection) -> subprocess.Popen:
        connfile = str(self.tmp / f"c{self.n}.json")
        proc = subprocess.Popen([PY, "-m", "shoal.agent", "--connection", connfile, "--slots", "2",
                                 "--quiet"], cwd=ROOT, env={**os.environ, "TMPDIR": str(self.tmp)})
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            self.stop(proc)


@pytest.fixture
def run(tmp_path):
    r = Run(tmp_path)
    yield r
    r.close()


def lines(path) -> Counter[str]:
    return Counter(path.read_text().split()) if path.exists() else Counter()


def test_kill_9_of_the_head_then_resume(run, tmp_path):
    db, side = str(tmp_path / "run.db"), tmp_path / "side.txt"
    n = 40

    def tasks(client: RawClient) -> list[list[Any]]:
        # each task leaves a side effect first: a line with its number
        return [client.command(f"echo {i} >> {side}; sleep 0.2; echo out-{i}", f"L{i}")
                for i in range(n)]

    conn, head = run.head(db)
    agent = run.agent(conn)
    c1 = RawClient(conn)
    assert c1.welcome["journal"] is True  # the head keys connect-mode clients' tasks
    first = tasks(c1)
    c1.submit(first)
    c1.wait_results(10)
    head.kill()  # kill -9 mid-run: the journal must hold every result that was sent
    head.wait()
    c1.drain()  # results already on their way were committed before they were sent
    index = {spec[0]: i for i, spec in enumerate(first)}
    done_before = {index[tid] for tid in c1.results}
    assert len(done_before) >= 10
    assert all(item[1] == P.OK for item in c1.results.values())
    c1.close()
    run.stop(agent)  # its head is gone (it stops what it ran)
    ran_once = lines(side)

    conn, head2 = run.head(db)
    agent2 = run.agent(conn)
    c2 = RawClient(conn)
    second = tasks(c2)
    # a task depending on one the journal answers runs once that answer is in
    dep = c2.command(f"echo dep >> {side}", "dep", deps=[second[0][0]])
    c2.submit([*second, dep])
    c2.wait_results(n + 1)
    assert c2.duplicates == 0
    assert all(item[1] == P.OK for item in c2.results.values()), c2.results
    stats = c2.stats()
    c2.close()

    count = lines(side)
    assert all(count[str(i)] >= 1 for i in range(n)) and count["dep"] == 1
    for i in done_before:  # finished and delivered before the kill: not run again
        assert count[str(i)] == 1 == ran_once[str(i)], (i, count[str(i)])
        item = c2.results[second[i][0]]
        assert item[3] == 0  # agent 0: answered from the journal
        assert pickle.loads(item[2]).stdout == f"out-{i}\n".encode()
    assert len(done_before) <= stats["from_journal"] < n
    assert sum(item[3] == 0 for item in c2.results.values()) == stats["from_journal"]
    # only tasks that were running at the kill may have run twice
    assert sum(count[str(i)] - 1 for i in range(n)) <= n - len(done_before)
    run.stop(agent2)
    run.stop(head2)  # the journal is the head's while it runs
    runs = summary(db)
    assert [r["run"] for r in runs] == [1, 2]
    assert runs[0]["ended"] is None and runs[1]["ended"] is not None  # killed, then ended
    assert runs[1]["reused"] == stats["from_journal"]
    assert runs[0]["ok"] >= len(done_before) and runs[0]["submitted"] == n
    r = subprocess.run([PY, "-m", "shoal.head.journal", db], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 3 and " killed " in r.stdout


def test_failed_tasks_run_again_on_resume(run, tmp_path):
    db, side = str(tmp_path / "run.db"), tmp_path / "side.txt"

    def go() -> tuple[RawClient, list[list[Any]], subprocess.Popen, dict[str, Any]]:
        conn, head = run.head(db)
        agent = run.agent(conn)
        client = RawClient(conn)
        specs = [client.command(f"echo {i} >> {side}; exit $(({i} % 2))", f"L{i}") for i in range(6)]
        for spec in specs:
            spec[P.T_PAYLOAD]["check"] = True  # non-zero exit is an ERR result
        client.submit(specs)
        client.wait_results(len(specs))
        stats = client.stats()
        client.close()
        run.stop(agent)
        run.stop(head)
        return client, specs, head, stats

    c1, s1, head1, stats1 = go()
    assert head1.returncode == 0 and stats1["from_journal"] == 0
    assert [c1.results[s[0]][1] for s in s1] == [P.OK, P.ERR] * 3
    c2, s2, _head2, stats2 = go()
    assert stats2["from_journal"] == 3
    assert [c2.results[s[0]][1] for s in s2] == [P.OK, P.ERR] * 3
    assert [c2.results[s[0]][3] == 0 for s in s2] == [True, False] * 3  # agent 0: the journal
    assert lines(side) == Counter({"0": 1, "1": 2, "2": 1, "3": 2, "4": 1, "5": 2})


def test_a_command_that_exited_non_zero_runs_again_on_resume(run, tmp_path):
    # `shoal run` sends commands without check=True: a failed line is an OK result whose
    # info says it exited non-zero. A resumed run must run it again.
    db, side = str(tmp_path / "run.db"), tmp_path / "side.txt"
    for _ in range(2):
        conn, head = run.head(db)
        agent = run.agent(conn)
        client = RawClient(conn)
        client.submit([client.command(f"echo {i} >> {side}; exit {i}", f"L{i}") for i in (0, 3)])
        client.wait_results(2)
        client.close()
        run.stop(agent)
        run.stop(head)
    assert lines(side) == Counter({"0": 1, "3": 2})


def test_head_refuses_a_file_that_is_not_a_journal(run, tmp_path):
    bad = tmp_path / "tasks.txt"
    bad.write_text("echo hello\n" * 500)
    _conn, head = run.head(str(bad))
    assert head.wait(60) == 2
    err = head.stderr.read().strip()
    assert err == f"shoal head: {str(bad)!r} is not a shoal journal (not an SQLite file)"
    assert bad.read_text() == "echo hello\n" * 500  # untouched
    r = subprocess.run([PY, "-m", "shoal", "head", "--connection-file", str(tmp_path / "x.json"),
                        "--bind", "tcp://127.0.0.1:0", "--journal", str(bad)],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "is not a shoal journal" in r.stderr
    assert not (tmp_path / "x.json").exists()


def test_shoal_head_journal(run, tmp_path):
    db, side = str(tmp_path / "run.db"), tmp_path / "side.txt"
    for attempt in (1, 2):
        connfile = tmp_path / f"s{attempt}.json"
        head = subprocess.Popen([PY, "-m", "shoal", "head", "--connection-file", str(connfile),
                                 "--bind", "tcp://127.0.0.1:0", "--journal", db],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                cwd=ROOT)
        run.procs.append(head)
        deadline = time.monotonic() + 60
        while not connfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        conn = Connection.read(str(connfile))
        run.n += 1
        os.replace(connfile, tmp_path / f"c{run.n}.json")  # where run.agent looks
        agent = run.agent(conn)
        client = RawClient(conn)
        specs = [client.command(f"echo {i} >> {side}", f"L{i}") for i in range(3)]
        client.submit(specs)
        client.wait_results(3)
        stats = client.stats()
        client.close()
        run.stop(agent)
        run.stop(head)
        assert stats["from_journal"] == (0 if attempt == 1 else 3)
        assert head.returncode == 0, head.stderr.read()
    assert lines(side) == Counter({"0": 1, "1": 1, "2": 1})
    assert [(r["run"], r["ok"], r["reused"]) for r in summary(db)] == [(1, 3, 0), (2, 0, 3)]


def _small_files() -> None:
    # the head may write at most 64 KiB to any file: its journal fills up mid-run
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal (kept by exec)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE semantics")
def test_journal_write_failure_mid_run_keeps_the_run_going(run, tmp_path):
    db = str(tmp_path / "run.db")
    conn, head = run.head(db, preexec_fn=_small_files)
    agent = run.agent(conn)
    client = RawClient(conn)
    # 200 results of ~2 KB each: far more than 64 KiB of journal
    specs = [client.command(f"head -c 2000 /dev/zero | tr '\\0' x; echo {i}", f"L{i}")
             for i in range(200)]
    client.submit(specs)
    client.wait_results(len(specs))
    assert all(item[1] == P.OK for item in client.results.values())
    client.close()
    run.stop(agent)
    run.stop(head)
    err = head.stderr.read()
    failures = [line for line in err.splitlines() if "without the journal" in line]
    assert len(failures) == 1, err
    assert "run.db': cannot write:" in failures[0]
    j = Journal(db)  # what was committed before the failure is still a valid journal
    assert 0 < j.resumable < len(specs)
    j.close()


# ---- through the client: Executor(journal=...) ---------------------------------------

needs_client_journal = pytest.mark.skipif(
    "journal" not in __import__("inspect").signature(__import__("shoal").Executor).parameters,
    reason="Executor(journal=) not here yet (the client's part of the journal)")


def side_effect(path: str, i: int, delay: float = 0.0) -> int:
    with open(path, "a") as fh:
        fh.write(f"{i}\n")
    time.sleep(delay)
    return i * i


@needs_client_journal
def test_executor_journal_resumes_python_results(tmp_path):
    from shoal import Executor

    db, side = str(tmp_path / "run.db"), str(tmp_path / "side.txt")
    with Executor(workers=2, journal=db) as ex:  # type: ignore[call-arg]
        first = [f.result(60) for f in [ex.submit(side_effect, side, i) for i in range(20)]]
        assert ex.stats()["from_journal"] == 0
    with Executor(workers=2, journal=db) as ex:  # type: ignore[call-arg]
        again = [ex.submit(side_effect, side, i) for i in range(20)]
        changed = ex.submit(side_effect, side, 100)  # a new argument: a new task
        assert [f.result(60) for f in again] == first == [i * i for i in range(20)]
        assert changed.result(60) == 10000
        assert ex.stats()["from_journal"] == 20
    count = lines(tmp_path / "side.txt")
    assert count == Counter({str(i): 1 for i in [*range(20), 100]})


def _mixed_run(db: str, side: str) -> tuple[list[Any], int]:
    from shoal import Command, Executor

    with Executor(workers=2, journal=db) as ex:  # type: ignore[call-arg]
        futs = [ex.submit(side_effect, side, 7), ex.submit(side_effect, side, 7),  # twice: 2 tasks
                ex.submit(Command(["sh", "-c", f"echo cmd >> {side}; echo out"]))]
        mapped = list(ex.map(side_effect, [side] * 6, range(10, 16), chunksize=2))
        results = [f.result(60) for f in futs]
        results[2] = results[2].stdout
        return [*results, mapped], ex.stats()["from_journal"]


@needs_client_journal
def test_executor_journal_keys_calls_commands_and_map_chunks(tmp_path):
    db, side = str(tmp_path / "run.db"), str(tmp_path / "side.txt")
    first, reused = _mixed_run(db, side)
    assert first == [49, 49, b"out\n", [i * i for i in range(10, 16)]] and reused == 0
    again, reused = _mixed_run(db, side)
    assert again == first and reused == 3 + 3  # two calls, a command, three chunks
    assert lines(tmp_path / "side.txt") == Counter({"7": 2, "cmd": 1, **{str(i): 1 for i in range(10, 16)}})
    assert [(r["ok"], r["reused"]) for r in summary(db)] == [(6, 0), (0, 6)]


_PROGRAM = """
import sys, time
from shoal import Executor, as_completed

def work(path, i):
    with open(path, "a") as fh:
        fh.write(f"{i}\\n")
    time.sleep(0.1)
    return i * i

if __name__ == "__main__":
    db, side = sys.argv[1], sys.argv[2]
    with Executor(workers=2, journal=db) as ex:
        futures = {ex.submit(work, side, i): i for i in range(60)}
        for f in as_completed(futures):
            print(futures[f], f.result(), flush=True)
"""


@needs_client_journal
def test_kill_9_of_a_journaled_program_then_rerun(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(_PROGRAM)
    db, side = str(tmp_path / "run.db"), tmp_path / "side.txt"
    cmd = [PY, str(prog), db, str(side)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=str(tmp_path),
                         env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)})
    printed = []
    for line in p.stdout:  # type: ignore[union-attr]
        printed.append(int(line.split()[0]))
        if len(printed) == 15:
            break
    p.kill()  # kill -9 of the program: its local head and agent follow it
    p.wait()
    p.stdout.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + 30
    while summary_or_none(db) is None and time.monotonic() < deadline:
        time.sleep(0.2)  # the head lets go of the journal when it is gone
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path), timeout=120,
                       env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    results = dict(tuple(map(int, line.split())) for line in r.stdout.splitlines())
    assert results == {i: i * i for i in range(60)}
    count = lines(side)
    assert all(count[str(i)] == 1 for i in printed)  # delivered before the kill: not rerun
    assert all(count[str(i)] >= 1 for i in range(60))
    assert sum(count.values()) - 60 <= 60 - len(printed)


def summary_or_none(db: str) -> list[dict[str, Any]] | None:
    try:
        return summary(db)
    except JournalError:
        return None


def test_kill_9_of_shoal_run_then_the_same_command(tmp_path):
    help_text = subprocess.run([PY, "-m", "shoal", "run", "--help"], capture_output=True,
                               text=True, cwd=ROOT, timeout=60).stdout
    if "--journal" not in help_text:
        pytest.skip("shoal run --journal not here yet (the client's part of the journal)")
    side = tmp_path / "side.txt"
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"echo {i} >> {side}; sleep 0.1; echo done-{i}\n" for i in range(40)))
    cmd = [PY, "-m", "shoal", "run", "--journal", str(tmp_path / "run.db"), "-j", "2",
           "--no-summary", str(tasks)]
    env = {**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         cwd=str(tmp_path), env=env)
    printed = []
    for line in p.stdout:  # type: ignore[union-attr]
        printed.append(int(line.split("-")[1]))
        if len(printed) == 12:
            break
    p.kill()  # kill -9 of the run: its local head and agent follow it
    p.wait()
    p.stdout.close()  # type: ignore[union-attr]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path), env=env,
                       timeout=180)
    assert r.returncode == 0, r.stderr
    # every line's output, the journal's ones included
    assert sorted(r.stdout.split()) == sorted(f"done-{i}" for i in range(40))
    count = lines(side)
    assert all(count[str(i)] == 1 for i in printed)  # done before the kill: not rerun
    assert all(count[str(i)] >= 1 for i in range(40))
    assert sum(count.values()) - 40 <= 40 - len(printed)  # only lines running at the kill
