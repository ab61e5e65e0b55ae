"""Task traces (shoal.trace): a real head with --trace, real agents, a real client.

One traced run (module fixture: `shoal head --trace`, agents a1 and a2 of one slot each, an
Executor) gives the trace most tests read: 8 naps of 0.5 s, a command, a task that fails
twice (retries=1). Others: an agent lost mid-task (two attempts, the first LOST), the agent
alone told by a pretend head to trace or not (the RESULT item's 6th field), the report and
`shoal trace` on that run, and bad trace files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from shoal import Command, Executor, trace
from shoal.trace.store import unpack_times
from shoal.transport import protocol as P
from tests.test_agent_failures import AGENT_ORIGIN, FakeHead

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def boom(x: int) -> None:
    raise ValueError(f"boom {x}")


def add(a: int, b: int) -> int:
    return a + b


def wait_file(path: str) -> bool:
    while not os.path.exists(path):
        time.sleep(0.02)
    return True


class Cluster:
    """`shoal head` on loopback plus agents, each in its own session; stop() ends them."""

    def __init__(self, tmp: Path, *head_flags: str) -> None:
        self.tmp = tmp
        self.connfile = tmp / "run.json"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.head = self._start("head", "--bind", "tcp://127.0.0.1:0", "--connection-file",
                                str(self.connfile), *head_flags)
        deadline = time.monotonic() + 30
        while not self.connfile.exists():
            assert self.head.poll() is None, (tmp / "head.log").read_text()
            assert time.monotonic() < deadline, "the head wrote no connection file"
            time.sleep(0.05)
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def _start(self, what: str, *args: str, log: str | None = None) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{log or what}.log", "wb") as out:
            p = subprocess.Popen([PY, "-m", "shoal", what, *args], env={**ENV, "TMPDIR": str(self.tmp)},
                                 cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.procs.append(p)
        return p

    def agent(self, name: str, *flags: str) -> None:
        self.agents[name] = self._start("agent", "--connect", str(self.connfile), "--name", name,
                                        "--slots", "1", *flags, log=name)

    def wait_agents(self, ex: Executor, n: int) -> None:
        deadline = time.monotonic() + 30
        while len(ex.agents()) < n:
            assert time.monotonic() < deadline, f"{len(ex.agents())} of {n} agents joined"
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM the head (it closes the trace and stops its agents), then the rest."""
        if self.head.poll() is None:
            self.head.send_signal(signal.SIGTERM)
            self.head.wait(15)
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()


@pytest.fixture(scope="module")
def traced() -> Iterator[dict[str, Any]]:
    """The traced run: its trace file and what the client saw."""
    tmp = Path(tempfile.mkdtemp(prefix="shoal-test-trace-"))
    path = tmp / "run.trace"
    c = Cluster(tmp, "--trace", str(path))
    try:
        c.agent("a1")
        c.agent("a2")
        with Executor(connect=str(c.connfile)) as ex:
            c.wait_agents(ex, 2)
            naps = [ex.submit(nap, 0.5) for _ in range(8)]
            cmd = ex.submit(Command("echo hi"))
            bad = ex.options(retries=1).submit(boom, 7)
            assert [f.result(30) for f in naps] == [0.5] * 8
            assert cmd.result(30).stdout == b"hi\n"
            with pytest.raises(ValueError, match="boom 7"):
                bad.result(30)
            where = {f.tid: f.agent for f in [*naps, cmd, bad]}
            tids = {"naps": [f.tid for f in naps], "cmd": cmd.tid, "bad": bad.tid}
    finally:
        c.stop()
    yield {"path": str(path), "where": where, **tids}
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


def test_one_row_per_attempt_in_order_on_the_right_agent(traced: dict[str, Any]) -> None:
    t = trace.read(traced["path"])
    count = Counter((a.tid, a.attempt) for a in t.attempts)
    assert set(count.values()) == {1}, "an attempt recorded twice"
    by_tid: dict[int, list[trace.Attempt]] = {}
    for a in t.attempts:
        by_tid.setdefault(a.tid, []).append(a)
    assert set(by_tid) == set(traced["where"]), "tasks in the trace != tasks submitted"
    for tid in [*traced["naps"], traced["cmd"]]:
        (a,) = by_tid[tid]
        assert (a.attempt, a.status, a.note) == (1, "ok", None)
        assert a.agent == traced["where"][tid]  # where the client was told it ran
    bad = sorted(by_tid[traced["bad"]], key=lambda a: a.attempt)
    assert [(a.attempt, a.status) for a in bad] == [(1, "error"), (2, "error")]
    assert "boom 7" in (bad[0].note or "")
    for a in t.attempts:
        times = [a.submitted, a.dispatched, a.launched, a.started, a.ended, a.received]
        assert None not in times, a
        assert times == sorted(times), f"times out of order: {a}"
        assert a.agent in ("a1", "a2") and a.node
    naps = [by_tid[tid][0] for tid in traced["naps"]]
    assert {a.name for a in naps} == {f"{__name__}.nap"}
    assert all(a.kind == "py" and a.worker == 0 and a.cores == 1 for a in naps)
    assert all(0.5 <= a.ended - a.started < 1.5 for a in naps)
    cmd = by_tid[traced["cmd"]][0]
    assert (cmd.kind, cmd.name, cmd.worker) == ("cmd", "echo", None)
    assert {a.name for a in t.agents} == {"a1", "a2"}
    assert all(a.left is not None for a in t.agents)  # the head stopped them: leave records
    assert t.ended is not None and not t.truncated and t.stats["completed"] == 10


def test_summary_utilization_and_counts(traced: dict[str, Any]) -> None:
    s = trace.summary(traced["path"])
    assert (s["tasks"], s["attempts"], s["ok"], s["failed"]) == (10, 11, 9, 1)
    assert (s["retried"], s["failed_attempts"]) == (1, 2)
    # 8 x 0.5 s on 2 slots: 2 s of a ~2 s window, both slots busy nearly all of it
    assert 2.0 <= s["makespan_s"] < 3.5
    assert 0.7 <= s["cores"]["utilization"] <= 1.0, s["cores"]
    assert 4.0 <= s["cores"]["busy_core_s"] < 4.5
    assert s["gpus"] is None
    assert s["setup_s"]["n"] == 11 and s["head_latency_s"]["n"] == 10
    assert 0 <= s["setup_s"]["p50"] <= s["setup_s"]["max"]
    agents = {a["name"]: a for a in s["agents"]}
    assert set(agents) == {"a1", "a2"}
    assert sum(a["tasks"] for a in agents.values()) == 11
    assert all(0.6 <= a["busy_fraction"] <= 1.0 for a in agents.values())
    assert [f["attempt"] for f in s["failures"]] == [1, 2]


def test_shoal_trace_prints_the_report(traced: dict[str, Any]) -> None:
    out = subprocess.run([PY, "-m", "shoal", "trace", traced["path"]], env=ENV,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "tasks      10 (9 ok, 1 failed), 11 attempts, 1 tasks retried" in text
    assert "utilization" in text and "setup" in text and "makespan" in text
    assert "a1" in text and "a2" in text and "boom 7" in text
    js = subprocess.run([PY, "-m", "shoal", "trace", traced["path"], "--json"], env=ENV,
                        capture_output=True, text=True, timeout=60)
    assert js.returncode == 0, js.stderr
    s = json.loads(js.stdout)
    assert s["tasks"] == 10 and 0.7 <= s["cores"]["utilization"] <= 1.0


def test_a_lost_agent_gives_a_lost_attempt_then_a_retry(tmp_path: Path) -> None:
    path = tmp_path / "lost.trace"
    c = Cluster(tmp_path, "--trace", str(path), "--heartbeat-timeout", "1")
    try:
        c.agent("a1")
        with Executor(connect=str(c.connfile)) as ex:
            c.wait_agents(ex, 1)
            f = ex.submit(nap, 2.0)  # runs on a1, the only agent
            c.agent("a2")
            c.wait_agents(ex, 2)
            os.killpg(c.agents["a1"].pid, signal.SIGKILL)
            assert f.result(30) == 2.0
            assert f.agent == "a2"
    finally:
        c.stop()
    t = trace.read(path)
    rows = sorted((a for a in t.attempts if a.tid == f.tid), key=lambda a: a.attempt)
    assert [(a.attempt, a.status, a.agent) for a in rows] == [(1, "lost", "a1"), (2, "ok", "a2")]
    assert rows[0].started is None and rows[0].received >= rows[0].dispatched  # closed by the head
    a1 = next(a for a in t.agents if a.name == "a1")
    assert a1.lost and a1.left is not None


def traced_results(head: FakeHead, tids: set[int], timeout: float = 30.0) -> dict[int, list[Any]]:
    """Like FakeHead.results for a traced agent: its RESULTS carry 5-field items and the
    times packed as one blob (3rd field, pack_times); each item gets its times back as
    item[5] (what the head's Recorder stores)."""
    got: dict[int, list[Any]] = {}
    deadline = time.monotonic() + timeout
    while set(got) != tids:
        left = deadline - time.monotonic()
        assert left > 0, f"missing results of {sorted(tids - set(got))}; had {got}"
        m = head.recv(left)
        if m is None or m[1][0] != P.RESULTS:
            continue
        items = m[1][1]
        assert len(m[1]) == 3 and isinstance(m[1][2], bytes), m[1]
        assert all(len(item) == 5 for item in items), items
        for item, times in zip(items, unpack_times(m[1][2], len(items)), strict=True):
            assert item[0] not in got, f"result of {item[0]} twice"
            got[item[0]] = [*item, times]
    return got


def test_agent_attaches_times_only_when_the_head_asks(tmp_path: Path) -> None:
    head = FakeHead(str(tmp_path))
    try:
        # told nothing: results are the 5 fields they always were
        head.start_agent(slots=2)
        plain = head.join()
        tids = head.give(plain, head.py(add, 1, 2), head.cmd(["/bin/true"]))
        got = head.results(set(tids))
        assert all(len(item) == 5 for item in got.values()), got

        # WELCOME says trace: the 6th field is [launched, started, ended, cpus, gpus, worker]
        head.start_agent("--gpus", "2", slots=2)
        ident, _ = head.expect(P.HELLO)
        head.send(ident, [P.WELCOME, {"origin": 2 * AGENT_ORIGIN, "prefetch": 1, "run_id": "t",
                                      "slots": 2, "heartbeat_s": 0.5, "timeout_s": 8.0,
                                      "num": 2, "trace": True}])
        head.agents[ident] = 0.5
        two = head.cmd(["/bin/sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], opts={"gpus": 1})
        two[P.T_CORES] = 2
        before = time.time()
        py, cmd, gpu, pygpu = head.give(ident, head.py(add, 1, 2), head.cmd(["/bin/true"]), two,
                                        head.py(add, 2, 3, opts={"gpus": 1}))
        got = traced_results(head, {py, cmd, gpu, pygpu})
        after = time.time()
        for tid, item in got.items():
            assert len(item) == 6 and item[P.R_STATUS] == P.OK, item
            launched, started, ended = item[5][:3]
            assert before <= launched <= started <= ended <= after, (tid, item[5])
        assert got[py][5][5] in (0, 1) and got[py][5][3:5] == [None, None]  # its worker
        assert got[cmd][5][5] is None
        visible = pickle_loads(got[gpu][2]).stdout.decode().strip()
        assert got[gpu][5][4] == [visible]  # the GPU id the command saw
        assert len(got[pygpu][5][4]) == 1 and got[pygpu][5][5] in (0, 1)  # its device, worker
        cpus = got[gpu][5][3]
        assert cpus is None or len(cpus) == 2  # bound to 2 CPUs where binding applies
    finally:
        for p in head.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        head.close()


def pickle_loads(data: bytes) -> Any:
    import pickle

    return pickle.loads(data)


def test_bad_trace_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("this is not a trace\n")
    for path, why in ((junk, "is not a shoal trace"), (tmp_path / "none", "cannot read trace")):
        out = subprocess.run([PY, "-m", "shoal", "trace", str(path)], env=ENV,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stdout == ""
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and why in lines[0] and str(path) in lines[0], out.stderr
    # a head refuses to append its trace to a file that is not one
    head = subprocess.run([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                           "--connection-file", str(tmp_path / "c.json"), "--trace", str(junk)],
                          env=ENV, capture_output=True, text=True, timeout=60)
    assert head.returncode == 2
    assert "is not a shoal trace" in head.stderr and str(junk) in head.stderr
    assert junk.read_text() == "this is not a trace\n"
    with pytest.raises(trace.TraceError, match="no run 5"):
        trace.read(_tiny_trace(tmp_path), run=5)


def _tiny_trace(tmp: Path) -> str:
    """A trace of one head run with no tasks (a head started and stopped)."""
    from shoal.trace.store import Recorder

    path = str(tmp / "tiny.trace")
    Recorder(path).close({})
    return path


def test_a_torn_last_write_and_appended_runs(tmp_path: Path) -> None:
    from shoal.trace.store import Recorder

    path = _tiny_trace(tmp_path)
    r = Recorder(path)  # a second head run on the same file
    spec = [1 << 32 | 1, P.PY, 5, b"", [], 1, -1, None, None, 0, 1]
    r.submitted([spec])
    r.funcs({5: "mod.fn"})
    r.resolved({b"c": [[spec[0], P.CANCELLED, b"", 0, None]]})
    # an MPI command of 2 ranks led by agent "n1": where the head put its ranks
    r.joined(b"n1", "agent", 7, {"slots": 2}, {"node": "node1", "gpus": 0, "memory": 0})
    mpi = [1 << 32 | 2, P.CMD, 0, {"argv": ["/bin/sh", "-c", "mpi_hello x"]}, [], 1, -1, None,
           {"ranks": 2}, 0, 1]
    r.live = {mpi[0]: type("Task", (), {"spec": mpi, "agent": b"n1", "opts": mpi[8]})()}
    r.submitted([mpi])
    mpi[P.T_ATTEMPT] = 1
    mpi[P.T_OPTS]["hosts"] = [["node1", 1, 1], ["node2", 1, 1]]
    r.dispatched(b"n1", [mpi])
    r.results(b"n1", [[mpi[0], P.OK, b"", 1, None, [1.0, 2.0, 3.0, None, None, None]]])
    r.close({"completed": 2})
    t = trace.read(path)
    assert (t.run, t.runs) == (2, 2)
    assert [(a.attempt, a.status, a.name, a.agent) for a in t.attempts] == [
        (0, "cancelled", "mod.fn", None), (1, "ok", "mpi_hello", "n1")]
    m = t.attempts[1]
    assert (m.ranks, m.core_count, m.node, m.hosts) == (2, 2, "node1",
                                                        [["node1", 1, 1], ["node2", 1, 1]])
    assert (m.launched, m.started, m.ended) == (1.0, 2.0, 3.0)
    csv = subprocess.run([PY, "-m", "shoal", "trace", "--csv", path], env=ENV,
                         capture_output=True, text=True, timeout=60)
    assert csv.returncode == 0 and len(csv.stdout.splitlines()) == 3  # header + 2 attempts
    assert trace.read(path, run=1).attempts == []
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-3])  # a head killed in the middle of a write
    t = trace.read(path)
    assert t.truncated and t.ended is None


def test_cancelled_timed_out_and_dependent_tasks(tmp_path: Path) -> None:
    path = tmp_path / "ends.trace"
    c = Cluster(tmp_path, "--trace", str(path))
    try:
        c.agent("a1")
        with Executor(connect=str(c.connfile)) as ex:
            c.wait_agents(ex, 1)
            # The one slot (and worker) is held by a Python task until the queued ones are
            # cancelled: were it held by the timed-out task, a cancel slower than its 1 s (a
            # loaded machine) would find the next task already started. (A command would
            # not do: the worker, free, may start a queued task before the command starts.)
            gate = tmp_path / "gate"
            hold = ex.submit(wait_file, str(gate))
            queued = [ex.submit(nap, 5.0) for _ in range(4)]  # some on the agent, some not
            try:
                time.sleep(0.1)
                assert all(f.cancel() for f in queued)
                slow = ex.options(timeout=1.0).submit(nap, 5.0)   # runs, killed at 1 s
            finally:
                gate.touch()  # (on a failure: the executor's exit waits for the rest)
            assert hold.result(30) is True
            bad = ex.submit(boom, 1)
            child = ex.options(after=[bad]).submit(add, 1, 2)  # never runs
            for f in (slow, bad, child):
                with pytest.raises(Exception):  # noqa: B017 - each fails its own way
                    f.result(30)
    finally:
        c.stop()
    s = trace.summary(path)
    by_tid = {a.tid: a for a in trace.read(path).attempts}
    assert by_tid[hold.tid].status == "ok"
    assert by_tid[slow.tid].status == "timeout" and by_tid[slow.tid].started is not None
    assert {by_tid[f.tid].status for f in queued} == {"cancelled"}
    assert all(by_tid[f.tid].started is None for f in queued)
    assert (by_tid[bad.tid].attempt, by_tid[bad.tid].status) == (1, "error")
    dep = by_tid[child.tid]
    assert (dep.attempt, dep.status, dep.agent, dep.dispatched) == (0, "depfail", None, None)
    assert "dependency" in (dep.note or "")
    assert (s["tasks"], s["ok"], s["failed"], s["cancelled"]) == (8, 1, 3, 4)


def _welcome(connfile: Path) -> dict[str, Any]:
    """What a head says to a peer that joins (a client's HELLO, answered by WELCOME)."""
    import zmq

    from shoal.transport.connfile import Connection
    from shoal.transport.session import PeerSession, secure_client, server_key

    conn = Connection.read(str(connfile))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        secure_client(sock, server_key(conn))
        sock.connect(conn.address)
        codec = PeerSession(conn.key)
        sock.send_multipart(codec.encode([P.HELLO, "client", {"pid": os.getpid()}]))
        assert sock.poll(20_000), "no WELCOME"
        msg = codec.decode(*sock.recv_multipart())
        assert msg[0] == P.WELCOME
        sock.send_multipart(codec.encode([P.BYE, "done"]))
        return msg[1]
    finally:
        sock.close(linger=500)
        ctx.term()


def test_welcome_says_whether_the_head_traces(tmp_path: Path) -> None:
    """Agents attach times only when WELCOME says so (the agent's side: the test above)."""
    for flags, traced in (((), False), (("--trace", str(tmp_path / "w.trace")), True)):
        (tmp_path / "run.json").unlink(missing_ok=True)
        c = Cluster(tmp_path, *flags)
        try:
            assert _welcome(c.connfile)["trace"] is traced
        finally:
            c.stop()
    assert [p.name for p in tmp_path.glob("*.trace")] == ["w.trace"]


def test_gpu_tasks_devices_and_gpu_utilization(tmp_path: Path) -> None:
    path = tmp_path / "gpu.trace"
    c = Cluster(tmp_path, "--trace", str(path))
    try:
        c.agent("g1", "--gpus", "2", "--slots", "2")
        with Executor(connect=str(c.connfile)) as ex:
            c.wait_agents(ex, 1)
            futs = [ex.options(gpus=1).submit(Command("sleep 0.3; echo $CUDA_VISIBLE_DEVICES"))
                    for _ in range(4)]
            seen = {f.tid: f.result(30).stdout.decode().strip() for f in futs}
    finally:
        c.stop()
    rows = {a.tid: a for a in trace.read(path).attempts}
    for tid, device in seen.items():
        assert (rows[tid].gpus, rows[tid].gpu_ids) == (1, [device])  # what the command saw
    s = trace.summary(path)
    assert s["gpus"] is not None and 0.3 <= s["gpus"]["utilization"] <= 1.0, s["gpus"]
    assert s["gpus"]["busy_gpu_s"] >= 4 * 0.3


def test_executor_trace_on_the_local_default(tmp_path: Path) -> None:
    path = tmp_path / "local.trace"
    with Executor(workers=2, trace=path) as ex:
        assert list(ex.map(add, range(20), range(20), chunksize=5)) == [2 * i for i in range(20)]
        assert ex.submit(Command(["/bin/true"])).result().returncode == 0
    s = trace.summary(path)  # the head closed it before the executor returned
    assert s["ended"] is not None
    assert (s["tasks"], s["attempts"], s["ok"], s["failed"]) == (5, 5, 5, 0)
    kinds = Counter(a.kind for a in trace.read(path).attempts)
    assert kinds == {"chunk": 4, "cmd": 1}
    with pytest.raises(ValueError, match=r"trace= .*--trace\)"):
        Executor(connect=str(tmp_path / "none.json"), trace=path)


def test_shoal_run_and_python_m_shoal_keep_a_trace(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("echo one\necho two\nexit 3\n")
    path = tmp_path / "run.trace"
    out = subprocess.run([PY, "-m", "shoal", "run", "-j", "2", "--trace", str(path), str(tasks)],
                         env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr  # one line failed
    assert "utilization" in out.stderr and "setup" in out.stderr  # the summary reads the trace
    s = trace.summary(path)
    assert (s["tasks"], s["ok"], s["failed"]) == (3, 2, 1)
    prog = tmp_path / "prog.py"
    prog.write_text("from shoal import futures\n"
                    "print(sum(futures.map(abs, range(-5, 5))))\n")
    path2 = tmp_path / "prog.trace"
    out = subprocess.run([PY, "-m", "shoal", "-n", "2", "--trace", str(path2), str(prog)],
                         env=ENV, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "25", out.stderr
    assert trace.summary(path2)["tasks"] >= 1
