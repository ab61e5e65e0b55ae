"""The client side of failures (issue 10): head loss, task options, journal keys, light futures.

Two kinds of head: real ones (the local default, or ``python -m shoal.head`` + ``python -m
shoal.agent`` started here) for kill -9, and :class:`WireHead`, a head played by the test
over a real ZeroMQ socket and the real signed protocol, which shows exactly what the client
puts on the wire and lets the test decide when (and whether) each result comes back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import pytest
import zmq

import shoal
from shoal import Command, Executor, ExecutorError, HeadLost, TaskLost, TaskTimeout
from shoal.client import options as O
from shoal.task.codec import Encoder
from shoal.task.errors import decode_error, exception_payload
from shoal.task.future import ShoalFuture, deliver
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection
from shoal.transport.keys import KeyCounter, line_key

from .conftest import ROOT, pid_alive, wait_gone

PY = sys.executable


def inc(x):
    return x + 1


def nap(t):
    time.sleep(t)
    return t


# ---- a head played by the test ------------------------------------------------------------
class _RunCodec:
    """Signing with the run secret alone, for a transport without per-connection sessions."""

    def __init__(self, secret: bytes) -> None:
        self.codec = P.Codec(secret)

    def decode(self, ident: bytes, tag: bytes, body: bytes) -> list:
        return self.codec.decode(tag, body)

    def encode(self, ident: bytes, msg: list) -> list[bytes]:
        return self.codec.encode(msg)


def _head_codec(secret: bytes):
    try:  # per-connection sessions (handshake + sequence numbers), where the transport has them
        from shoal.transport.session import HeadSessions
    except ImportError:
        return _RunCodec(secret)
    return HeadSessions(secret)


class WireHead:
    """The head's side of the protocol on a real socket: WELCOMEs, records what clients
    send, answers CANCEL with what the test says, resolves tasks when the test says."""

    def __init__(self, tmp_path, **welcome) -> None:
        self.conn = Connection.new(f"ipc://{tmp_path}/wire-head")
        self.path = str(tmp_path / "wire.json")
        self.conn.write(self.path)
        self.codec = _head_codec(self.conn.key)
        self.welcome = {"origin": 1, "prefetch": 1, "run_id": self.conn.run_id, "slots": 2,
                        "heartbeat_s": 0.2, "timeout_s": 1.5, "num": 0, **welcome}
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(self.conn.address)
        self.lock = threading.Lock()
        self.tasks: list[list] = []          # every task spec received, in order
        self.kinds: list[tuple[float, int]] = []
        self.cancellable: set[int] = set()   # tids the head "stopped" when asked
        self.cancels: list[list] = []        # every CANCEL received
        self.outbox: list[list] = []
        self.beating = True
        self.silent = False
        self.names: dict = {}  # fid -> qualified name, as SUBMITs carry them
        self.client: bytes | None = None
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _send(self, msg: list) -> None:
        self.sock.send_multipart([self.client, *self.codec.encode(self.client, msg)])

    def _loop(self) -> None:
        next_beat = time.monotonic()
        while self.running:
            if self.sock.poll(20):
                ident, sig, body = self.sock.recv_multipart()
                msg = self.codec.decode(ident, sig, body)
                if msg is None:  # sent before the client had a session: dropped
                    continue
                with self.lock:
                    self.kinds.append((time.monotonic(), msg[0]))
                    if msg[0] == P.SUBMIT:
                        self.tasks.extend(msg[1])
                        self.names.update(msg[4])
                if self.silent:
                    continue
                if msg[0] == P.HELLO:
                    self.client = ident
                    self._send([P.WELCOME, self.welcome])
                elif msg[0] == P.CANCEL:
                    with self.lock:
                        self.cancels.append(msg)
                        done = [t for t in msg[2] if t in self.cancellable]
                    self._send([P.CANCEL, msg[1], done])
            with self.lock:
                out, self.outbox = self.outbox, []
            if self.client is None or self.silent:
                continue
            for m in out:
                self._send(m)
            if self.beating and time.monotonic() >= next_beat:
                next_beat = time.monotonic() + 0.2
                self._send([P.HEARTBEAT])

    def send(self, msg: list) -> None:
        with self.lock:
            self.outbox.append(msg)

    def wait_tasks(self, n: int, timeout: float = 10.0) -> list[list]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.tasks) >= n:
                    return list(self.tasks)
            time.sleep(0.01)
        raise AssertionError(f"the client sent {len(self.tasks)} tasks, not {n}")

    def close(self) -> None:
        self.running = False
        self.thread.join(5)
        self.sock.close(0)
        self.ctx.term()


@pytest.fixture
def wire(tmp_path):
    heads: list[WireHead] = []

    def make(**welcome) -> WireHead:
        where = tmp_path / f"head{len(heads)}"
        where.mkdir()
        heads.append(WireHead(where, **welcome))
        return heads[-1]

    yield make
    for h in heads:
        h.close()


@contextlib.contextmanager
def joined(head: WireHead, **kwargs):
    """An Executor on a played head; at the end the head shuts down, failing what is left."""
    ex = Executor(connect=head.path, **kwargs)
    try:
        yield ex
    finally:
        head.send([P.SHUTDOWN])
        ex.shutdown()


@pytest.fixture(scope="module")
def ex():
    with Executor(workers=2) as executor:
        yield executor


def opts_of(spec: list) -> dict | None:
    return spec[P.T_OPTS] if len(spec) > P.T_OPTS else None


# ---- exceptions -----------------------------------------------------------------------------
def test_exceptions_are_exported_with_their_bases():
    assert issubclass(shoal.HeadLost, shoal.ExecutorError)
    assert issubclass(shoal.ExecutorError, RuntimeError)
    assert issubclass(shoal.TaskTimeout, TimeoutError)
    from shoal.client.executor import ExecutorError as from_executor

    assert from_executor is shoal.ExecutorError
    for name in ("HeadLost", "TaskTimeout", "TaskLost", "ExecutorError"):
        assert name in shoal.__all__


def test_statuses_become_their_exceptions():
    assert isinstance(decode_error(P.TIMEOUT, b"killed at its time limit (2 s)"), TaskTimeout)
    assert isinstance(decode_error(P.LOST, b"worker died"), TaskLost)
    assert str(decode_error(P.TIMEOUT, b"killed after 2 s")) == "killed after 2 s"


def test_failed_attempts_become_a_note():
    lines = ["attempt 1 on agent-a: ValueError: x", "attempt 2 on agent-b: ValueError: x"]
    f = ShoalFuture(1, None)
    deliver(f, P.ERR, exception_payload(ValueError("x"), "Traceback ...\nValueError: x\n"), lines)
    exc = f.exception(0)
    assert isinstance(exc, ValueError)
    note = "\n".join(exc.__notes__)
    assert "attempt 1 on agent-a: ValueError: x" in note and "attempt 2 on agent-b" in note
    lost = ShoalFuture(2, None)
    deliver(lost, P.LOST, b"worker died (SIGKILL)", ["attempt 1 on agent-a: lost", "attempt 2 on agent-a: lost"])
    with pytest.raises(TaskLost) as info:
        lost.result(0)
    assert any("attempt 2 on agent-a: lost" in n for n in info.value.__notes__)
    ok = ShoalFuture(3, None)
    deliver(ok, P.OK, pickle.dumps(5), ["attempt 1 on agent-a: lost"])
    assert ok.result(0) == 5


# ---- options ------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, what", [
    ({"retries": -1}, "retries"), ({"retries": 1.5}, "retries"), ({"retries": True}, "retries"),
    ({"timeout": 0}, "timeout"), ({"timeout": -2}, "timeout"), ({"timeout": float("nan")}, "timeout"),
    ({"timeout": "10"}, "timeout"), ({"retry_on": ValueError("x")}, "retry_on"),
    ({"retry_on": "ValueError"}, "retry_on"), ({"retry_on": ()}, "retry_on"),
    ({"retry_on": (ValueError, int)}, "retry_on"), ({"key": 3}, "key"), ({"key": ""}, "key"),
    ({"cores": 0}, "cores"), ({"agent": "a", "prefer": "b"}, "agent= or prefer="),
])
def test_bad_options_are_one_clear_error(ex, kwargs, what):
    with pytest.raises(ValueError, match=what):
        ex.options(**kwargs)


def test_bad_executor_options_fail_before_anything_starts(tmp_path):
    for kwargs, what in (({"retries": -1}, "retries"), ({"task_timeout": 0}, "task_timeout"),
                         ({"heartbeat_timeout": -1}, "heartbeat_timeout"),
                         ({"crash_limit": 0}, "crash_limit"), ({"journal": ""}, "journal")):
        with pytest.raises(ValueError, match=what):
            Executor(**kwargs)
    # the head's policy belongs to `shoal head` when joining one
    for kwargs in ({"journal": str(tmp_path / "j.db")}, {"crash_limit": 2}, {"heartbeat_timeout": 3}):
        with pytest.raises(ValueError, match="shoal head"):
            Executor(connect=str(tmp_path / "none.json"), **kwargs)


def test_task_opts_holds_only_what_differs_from_the_defaults():
    assert O.task_opts(None, None, None) is None
    assert O.task_opts(0, None, None) is None
    assert O.task_opts(2, (ValueError, OSError), 1) == {
        "retries": 2, "retry_on": ["builtins.ValueError", "builtins.OSError"], "timeout": 1.0}
    assert O.task_opts(None, KeyError, None, "k") == {"retry_on": ["builtins.KeyError"], "key": "k"}
    assert O.class_names(shoal.TaskLost) == ["shoal.task.errors.TaskLost"]


def test_options_land_in_the_task_on_the_wire(wire):
    head = wire()
    with joined(head) as plain:
        plain.submit(inc, 1)
        plain.options(retries=3, retry_on=ValueError, timeout=2.5).submit(inc, 2)
        plain.options(agent="a-1", key="mine").submit(inc, 3)
        plain.options(timeout=1).map(inc, range(4), chunksize=2)
        specs = head.wait_tasks(5)
        assert len(specs[0]) == 7  # nothing optional travels
        assert opts_of(specs[1]) == {"retries": 3, "retry_on": ["builtins.ValueError"], "timeout": 2.5}
        assert specs[1][P.T_PLACE] is None
        assert specs[2][P.T_PLACE] == ["a-1", True] and opts_of(specs[2]) == {"key": "mine"}
        assert [opts_of(s) for s in specs[3:5]] == [{"timeout": 1.0}] * 2
    head2 = wire()
    with joined(head2, retries=2, task_timeout=30) as defaults:
        defaults.submit(inc, 1)
        defaults.options(retries=0).submit(inc, 2)
        defaults.options(timeout=5, retries=4).submit(inc, 3)
        defaults.submit(Command("true"))
        specs = head2.wait_tasks(4)
        assert opts_of(specs[0]) == {"retries": 2, "timeout": 30.0}
        assert opts_of(specs[1]) == {"timeout": 30.0}
        assert opts_of(specs[2]) == {"retries": 4, "timeout": 5.0}
        assert opts_of(specs[3]) == {"retries": 2, "timeout": 30.0}


# ---- journal keys -------------------------------------------------------------------------
def _keys_of_one_run() -> list[str | None]:
    """Keys the head derives (transport.keys) for what a client's encoder sends."""
    enc = Encoder(1)
    specs = [enc.call(inc, (1,), {}, [], 1), enc.call(inc, (1,), {}, [], 1),
             enc.call(inc, (2,), {}, [], 1), enc.call(nap, (1,), {}, [], 1),
             enc.command(Command(["echo", "hi"]), []), enc.command(Command(["echo", "hi"]), []),
             enc.command(Command(["echo", "hi"], cwd="/tmp"), []),
             enc.call(inc, (1,), {}, [], 1) + [None, {"key": "chosen"}],
             enc.chunk(inc, [(0,), (1,), (2,)], 1), enc.chunk(inc, [(3,), (4,), (5,)], 1)]
    funcs, names = enc.take_funcs_and_names()
    assert set(funcs) == set(names)
    wire = P.Codec(b"k" * 32)  # through msgpack, as the head receives them
    _kind, specs, _funcs, _static, names = wire.decode(*wire.encode([P.SUBMIT, specs, funcs, 0, names]))
    one_by_one = KeyCounter(names)
    keys = KeyCounter(names).keys(specs)  # the head's loop: the same keys
    assert keys == [one_by_one.key(spec) for spec in specs]
    return keys


def test_journal_keys_are_distinct_and_the_same_in_a_rerun():
    first = _keys_of_one_run()
    assert None not in first and len(set(first)) == len(first)
    name = f"{__name__}.inc"
    assert first[0].startswith(name + ":") and first[0].endswith(":0")
    assert first[1].rsplit(":", 1) == [first[0].rsplit(":", 1)[0], "1"]  # same call, next number
    assert first[4].startswith("cmd:") and first[5].endswith(":1")
    assert first[7] == "chosen"
    assert _keys_of_one_run() == first
    assert line_key(3, "echo hi") == line_key(3, "echo hi") != line_key(4, "echo hi")


def test_a_task_the_rule_cannot_name_has_no_key():
    enc = Encoder(1)
    spec = enc.call(inc, (1,), {}, [], 1)
    assert KeyCounter({}).key(spec) is None  # its function's name never came
    assert KeyCounter({}).key([5, P.CMD, 0, {"argv": "not a list"}, [], 1, -1]) is None


@pytest.mark.parametrize("journal", [False, True])
def test_the_client_sends_names_not_keys(wire, journal):
    head = wire(journal=journal)  # a journaled head derives the keys itself
    with joined(head) as ex:
        ex.submit(inc, 1)
        ex.submit(inc, 2)
        ex.options(key="mine").submit(nap, 0)
        specs = head.wait_tasks(3)
        assert [len(s) for s in specs[:2]] == [7, 7] and opts_of(specs[2]) == {"key": "mine"}
        assert ex.journal_keys is journal
        with head.lock:
            assert head.names == {specs[0][P.T_FID]: f"{__name__}.inc",
                                  specs[2][P.T_FID]: f"{__name__}.nap"}


# ---- liveness against a played head -----------------------------------------------------------
def test_client_heartbeats_and_fails_everything_when_the_head_goes_silent(wire):
    head = wire(heartbeat_s=0.2, timeout_s=1.5)
    ex = Executor(connect=head.path)
    try:
        time.sleep(1.0)
        with head.lock:
            beats = [t for t, k in head.kinds if k == P.HEARTBEAT]
        assert len(beats) >= 3, "an idle client must send HEARTBEAT every heartbeat_s"
        futs = [ex.submit(inc, i) for i in range(3)]
        head.wait_tasks(3)
        head.silent = True
        t0 = time.monotonic()
        with pytest.raises(HeadLost, match=r"lost the head at ipc://.*silent for \d+ s"):
            futs[0].result(timeout=20)
        waited = time.monotonic() - t0
        assert waited < 1.5 + 3.0, f"HeadLost after {waited:.1f} s, the timeout is 1.5 s"
        assert all(isinstance(f.exception(0), HeadLost) for f in futs)
        with pytest.raises(HeadLost):
            ex.submit(inc, 9)
        with pytest.raises(HeadLost):
            ex.stats()
    finally:
        ex.shutdown()


def test_a_head_that_shuts_down_is_head_lost(wire):
    head = wire()
    ex = Executor(connect=head.path)
    try:
        f = ex.submit(inc, 1)
        head.wait_tasks(1)
        head.send([P.SHUTDOWN])
        with pytest.raises(HeadLost, match="shut down"):
            f.result(timeout=10)
    finally:
        ex.shutdown()


def test_cancel_asks_the_head_and_believes_its_answer(wire):
    head = wire()
    with joined(head) as ex:
        running, finished = ex.submit(nap, 100), ex.submit(nap, 100)
        specs = head.wait_tasks(2)
        head.cancellable.add(specs[0][0])  # the head stops this one where it runs
        assert running.cancel() and running.cancelled()
        assert not finished.cancel() and not finished.done()
        head.send([P.RESULTS, [[specs[1][0], P.OK, pickle.dumps(7), 0, None]]])
        assert finished.result(timeout=10) == 7
        # a late result of the stopped task changes nothing
        head.send([P.RESULTS, [[specs[0][0], P.CANCELLED, b"", 0, None]]])
        assert running.cancelled()


def test_shutdown_cancel_futures_asks_for_queued_tasks_only(wire):
    head = wire()  # 2 slots
    ex = Executor(connect=head.path)
    futs = [ex.submit(nap, 100) for _ in range(5)]
    specs = head.wait_tasks(5)
    tids = [s[0] for s in specs]
    head.cancellable.update(tids)  # nothing runs yet (workers still starting)
    assert futs[4].cancel()
    stopper = threading.Thread(target=ex.shutdown, kwargs={"cancel_futures": True})
    stopper.start()
    deadline = time.monotonic() + 10
    while len(head.cancels) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    head.send([P.RESULTS, [[t, P.OK, pickle.dumps("ran"), 0, None] for t in tids[:2]]])
    stopper.join(30)
    assert not stopper.is_alive()
    one, bulk = head.cancels
    assert one[2:] == [[tids[4]], True]           # cancel(): only if not started
    # shutdown(cancel_futures): queued only, and the first task of each slot is left to
    # run, as ProcessPoolExecutor runs its call queue, even when none has started yet
    assert bulk[2:] == [tids[2:4], True]
    assert [f.result(0) for f in futs[:2]] == ["ran", "ran"]
    assert all(f.cancelled() for f in futs[2:])


def test_shutdown_cancel_futures_before_any_task_starts_leaves_one_per_slot_to_run():
    """The race CPython's test_cancel_futures met: every task had reached the runtime and
    none had started (its workers still starting) when shutdown(cancel_futures=True) came.
    As with ProcessPoolExecutor (its call queue), the first task of each slot still runs;
    the rest are cancelled. The agent is stopped (SIGSTOP) so that nothing can start."""
    ex = Executor(workers=2)  # 2 slots
    agent = ex._cluster.agent.pid
    os.kill(agent, signal.SIGSTOP)
    try:
        futs = [ex.submit(nap, 0.01) for _ in range(10)]
        deadline = time.monotonic() + 20
        while ex.stats()["queued"] + ex.stats()["live"] < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
        # the head asks the stopped agent about what it holds: it answers once continued
        threading.Timer(1.0, os.kill, (agent, signal.SIGCONT)).start()
        ex.shutdown(wait=True, cancel_futures=True)
    finally:
        with contextlib.suppress(ProcessLookupError):  # (gone once shut down)
            os.kill(agent, signal.SIGCONT)
    assert [f.cancelled() for f in futs] == [False] * 2 + [True] * 8
    assert [f.result(0) for f in futs[:2]] == [0.01, 0.01]


def test_shutdown_cancel_futures_with_no_slot_known_cancels_every_queued_task(head):
    """A head with no agent yet (no slot known at join): nothing is left to run, so that
    queued work no longer needed leaves the queue (shoal alloc then cancels its jobs)."""
    connfile, _proc, _add_agent = head
    ex = Executor(connect=str(connfile))
    futs = [ex.submit(Command(["true"])) for _ in range(5)]
    deadline = time.monotonic() + 20
    while ex.stats()["queued"] < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    ex.shutdown(wait=False, cancel_futures=True)
    assert all(f.cancelled() for f in futs)
    with Executor(connect=str(connfile)) as other:  # the head's queue is empty
        assert other.stats()["queued"] == 0


def test_results_from_the_head_carry_attempts_and_statuses(wire):
    head = wire()
    with joined(head) as ex:
        futs = [ex.submit(inc, i) for i in range(4)]
        tids = [s[0] for s in head.wait_tasks(4)]
        head.send([P.RESULTS, [
            [tids[0], P.TIMEOUT, b"killed at its time limit (2 s)", 1,
             ["attempt 1 on agent-a: timed out after 2 s", "attempt 2 on agent-a: timed out after 2 s"]],
            [tids[1], P.LOST, b"worker died", 1, None],
            [tids[2], P.OK, pickle.dumps(3), 1, ["attempt 1 on agent-a: lost"]],
            [tids[3], P.OK, pickle.dumps(4), 1],  # a head of before attempts: 4 fields
        ]])
        with pytest.raises(TaskTimeout) as info:
            futs[0].result(timeout=10)
        assert "attempt 2 on agent-a: timed out" in "\n".join(info.value.__notes__)
        assert isinstance(info.value, TimeoutError)
        assert isinstance(futs[1].exception(10), TaskLost)
        assert [futs[2].result(10), futs[3].result(10)] == [3, 4]


# ---- light futures ----------------------------------------------------------------------------
def test_result_timeout_is_exact_through_other_futures_wakeups(wire):
    head = wire()
    with joined(head) as ex:
        slow = ex.submit(nap, 100)
        others = [ex.submit(inc, i) for i in range(200)]
        specs = head.wait_tasks(201)

        def resolve_others():  # wake-ups on the shared condition while `slow` waits
            for s in specs[1:]:
                head.send([P.RESULTS, [[s[0], P.OK, pickle.dumps(s[0]), 0, None]]])
                time.sleep(0.004)

        t = threading.Thread(target=resolve_others)
        t.start()
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            slow.result(timeout=0.8)
        assert time.monotonic() - t0 >= 0.79
        with pytest.raises(TimeoutError):
            slow.exception(timeout=0.1)
        t.join()
        assert [f.result(10) for f in others] == [s[0] for s in specs[1:]]
        assert not slow.done()
        head.send([P.RESULTS, [[specs[0][0], P.OK, pickle.dumps("late"), 0, None]]])
        assert slow.result(timeout=10) == "late"


def test_many_threads_wait_on_shared_and_distinct_futures(wire):
    head = wire()
    with joined(head) as ex:
        futs = [ex.submit(inc, i) for i in range(40)]
        specs = head.wait_tasks(40)
        got: dict[int, object] = {}
        lock = threading.Lock()

        def waiter(i):
            value = futs[i % 40].result(timeout=30)
            with lock:
                got[i] = value

        threads = [threading.Thread(target=waiter, args=(i,)) for i in range(80)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        for s in reversed(specs):
            head.send([P.RESULTS, [[s[0], P.OK, pickle.dumps(-s[0]), 0, None]]])
        for t in threads:
            t.join(30)
        assert got == {i: -specs[i % 40][0] for i in range(80)}


def test_light_futures_work_with_concurrent_futures_tools(ex):
    futs = [ex.submit(nap, 0.01 * (i % 5)) for i in range(30)]
    done, not_done = cf.wait(futs, timeout=60)
    assert not not_done and len(done) == 30
    firsts = [ex.submit(nap, 2), ex.submit(inc, 1)]
    done, not_done = cf.wait(firsts, return_when=cf.FIRST_COMPLETED, timeout=30)
    assert firsts[1] in done and firsts[0] in not_done
    bad = [ex.submit(nap, 2), ex.submit(O.retries_value, -1)]
    done, _ = cf.wait(bad, return_when=cf.FIRST_EXCEPTION, timeout=30)
    assert bad[1] in done and isinstance(bad[1].exception(), ValueError)
    assert sorted(f.result() for f in cf.as_completed([ex.submit(inc, i) for i in range(20)], timeout=60)) \
        == list(range(1, 21))
    with pytest.raises(TimeoutError):
        list(cf.as_completed([ex.submit(nap, 1)], timeout=0.3))
    calls: list[tuple[str, object]] = []
    f = ex.submit(inc, 1)
    f.add_done_callback(lambda g: calls.append(("before", g.result())))
    f.result(timeout=30)
    f.add_done_callback(lambda g: calls.append(("after", g.result())))
    deadline = time.monotonic() + 10
    while len(calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls == [("before", 2), ("after", 2)]
    assert isinstance(f, cf.Future) and not vars(f)  # all in slots

    async def both():
        return await asyncio.gather(asyncio.wrap_future(ex.submit(inc, 5)),
                                    asyncio.wrap_future(ex.submit(inc, 6)))

    assert asyncio.run(both()) == [6, 7]
    for g in firsts + bad:
        g.cancel()


def test_futures_hold_little_memory(ex):
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        futs = [ShoalFuture(i + (1 << 40), ex) for i in range(20000)]
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert grown / len(futs) < 250, f"{grown / len(futs):.0f} B per future"


# ---- the policy reaches a real head -----------------------------------------------------------
def flaky(path, fails):
    """Fails its first ``fails`` attempts (counted as files in ``path``)."""
    n = len(os.listdir(path))
    open(os.path.join(path, str(n)), "w").close()
    if n < fails:
        raise ValueError(f"failure {n}")
    return n


def die(path):
    open(os.path.join(path, str(len(os.listdir(path)))), "w").close()
    os._exit(3)


def test_retries_run_failed_attempts_again_and_the_error_lists_them(tmp_path):
    dirs = [tmp_path / name for name in ("a", "b", "c")]
    for d in dirs:
        d.mkdir()
    with Executor(workers=2, retries=2) as ex:
        assert ex.submit(flaky, str(dirs[0]), 2).result(timeout=60) == 2
        with pytest.raises(ValueError, match="failure 1") as info:
            ex.options(retries=1).submit(flaky, str(dirs[1]), 5).result(timeout=60)
        note = info.value.__notes__[-1]
        assert note.splitlines()[0] == "attempts of this task:"
        assert "attempt 1 on agent-" in note and "attempt 2 on agent-" in note
        with pytest.raises(ValueError, match="failure 0"):  # retry_on does not match: no retry
            ex.options(retries=3, retry_on=KeyError).submit(flaky, str(dirs[2]), 5).result(timeout=60)
    assert [len(os.listdir(d)) for d in dirs] == [3, 2, 1]


def test_crash_limit_and_heartbeat_timeout_reach_the_local_head(tmp_path):
    with Executor(workers=2, crash_limit=2, heartbeat_timeout=3) as ex:
        assert ex._timeout_s == 3.0  # the head's WELCOME says what it was started with
        with pytest.raises(TaskLost, match="crash limit 2") as info:
            ex.submit(die, str(tmp_path)).result(timeout=60)
        assert len(info.value.__notes__[-1].splitlines()) == 3  # the header and 2 attempts
        assert ex.submit(inc, 1).result(timeout=60) == 2
    assert len(os.listdir(tmp_path)) == 2


def _agent_stops_tasks() -> None:
    """Skip unless the agent can stop a running task (time limits, cancel of a running task)."""
    pytest.importorskip("shoal.agent.stopping", reason="the agent cannot stop running tasks here yet")


def test_a_time_limit_is_task_timeout_and_the_worker_goes_on():
    _agent_stops_tasks()
    with Executor(workers=1, task_timeout=1.5) as ex:
        with pytest.raises(TaskTimeout) as info:
            ex.submit(nap, 60).result(timeout=30)
        assert isinstance(info.value, TimeoutError)
        assert ex.options(timeout=30).submit(nap, 2).result(timeout=30) == 2  # options win
        with pytest.raises(TaskTimeout):
            ex.options(timeout=1).submit(nap, 60).result(timeout=30)
        assert ex.submit(inc, 1).result(timeout=30) == 2


def test_cancel_stops_a_running_task_and_frees_its_worker():
    _agent_stops_tasks()
    with Executor(workers=1) as ex:
        f = ex.submit(nap, 60)
        time.sleep(1.0)  # running by now: it is the only task on the only worker
        assert not f.cancel() and f.running()  # as concurrent.futures: it runs on
        assert f.cancel(running=True) and f.cancelled()  # shoal's: stop it where it runs
        assert ex.submit(inc, 1).result(timeout=20) == 2  # not behind the 60 s task


# ---- losing a real head ---------------------------------------------------------------------
def _descendants(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.split("\n"):
        if line.strip():
            p, pp = map(int, line.split())
            children.setdefault(pp, []).append(p)
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def test_kill_9_of_the_local_head_is_head_lost_at_once_and_leaves_nothing():
    ex = Executor(workers=1)
    cluster = ex._cluster
    try:
        assert ex.submit(inc, 1).result(timeout=60) == 2
        pending = [ex.submit(nap, 60) for _ in range(3)]
        procs = {cluster.head.pid, cluster.agent.pid} | _descendants(cluster.agent.pid)
        time.sleep(0.3)
        t0 = time.monotonic()
        os.kill(cluster.head.pid, signal.SIGKILL)
        with pytest.raises(HeadLost, match="lost the head at .*exited with SIGKILL"):
            pending[0].result(timeout=30)
        assert time.monotonic() - t0 < 8.0
        assert all(isinstance(f.exception(0), HeadLost) for f in pending)
        with pytest.raises(HeadLost):
            ex.submit(inc, 2)
    finally:
        ex.shutdown()
    assert not wait_gone(procs, 15.0), "processes of the local runtime were left behind"
    assert not os.path.exists(cluster.rundir)


def test_a_stopped_local_head_is_head_lost_after_the_timeout_and_leaves_nothing():
    ex = Executor(workers=1, heartbeat_timeout=2)
    cluster = ex._cluster
    try:
        assert ex.submit(inc, 1).result(timeout=60) == 2
        f = ex.submit(nap, 60)
        procs = {cluster.head.pid, cluster.agent.pid} | _descendants(cluster.agent.pid)
        t0 = time.monotonic()
        os.kill(cluster.head.pid, signal.SIGSTOP)
        with pytest.raises(HeadLost, match=r"lost the head at .*silent"):
            f.result(timeout=30)
        waited = time.monotonic() - t0
        assert waited < 2.0 + 4.0, f"HeadLost after {waited:.1f} s, the timeout is 2 s"
    finally:
        ex.shutdown()
    assert not wait_gone(procs, 15.0), "processes of the local runtime were left behind"


def test_kill_9_of_a_joined_head_is_head_lost_within_the_timeout(tmp_path):
    conn = Connection.new(f"ipc://{tmp_path}/head")
    path = str(tmp_path / "run.json")
    conn.write(path)
    env = dict(os.environ)
    head = subprocess.Popen([PY, "-m", "shoal.head", "--connection", path, "--quiet",
                             "--heartbeat-timeout", "2"], env=env, start_new_session=True)
    agent = subprocess.Popen([PY, "-m", "shoal.agent", "--connection", path, "--slots", "1",
                              "--quiet"], env=env, start_new_session=True)
    ex = None
    try:
        ex = Executor(connect=path)
        assert ex.submit(inc, 1).result(timeout=60) == 2
        f = ex.submit(nap, 60)
        time.sleep(0.3)
        head.kill()
        head.wait()
        t0 = time.monotonic()
        with pytest.raises(HeadLost, match=r"lost the head at ipc://.*silent for \d+ s"):
            f.result(timeout=60)
        waited = time.monotonic() - t0
        assert ex._timeout_s == 2.0
        assert waited < 2.0 + 4.0, f"HeadLost after {waited:.1f} s, the timeout is 2 s"
    finally:
        if ex is not None:
            ex.shutdown()
        for p in (head, agent):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the agent and its workers
                except ProcessLookupError:
                    pass
            p.wait(10)
        assert not pid_alive(agent.pid)


def test_executor_error_still_names_a_head_that_never_answers(tmp_path):
    conn = Connection.new(f"ipc://{tmp_path}/nobody")
    path = str(tmp_path / "c.json")
    conn.write(path)
    with pytest.raises(ExecutorError, match="no answer from the head"):
        Executor(connect=path, start_timeout=0.5)


# ---- the command lines ----------------------------------------------------------------------
def shoal_cli(args, **kw):
    return subprocess.Popen([PY, "-m", "shoal", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.parametrize("flags, what", [
    (["--retries", "-1"], "--retries must be at least 0"),
    (["--timeout", "0"], "--timeout must be a number of seconds > 0"),
    (["--connect", "x.json", "--journal", "j.db"], "shoal head --journal"),
])
def test_shoal_run_rejects_bad_failure_flags_in_one_line(tmp_path, flags, what):
    tasks = tmp_path / "t.txt"
    tasks.write_text("true\n")
    p = shoal_cli(["run", *flags, str(tasks)], cwd=tmp_path)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2
    assert err.strip().splitlines() == [f"shoal run: {err.strip().split(': ', 1)[1]}"]
    assert what in err


def test_shoal_run_sends_line_keys_and_policy_and_exits_3_when_the_head_is_lost(wire, tmp_path):
    head = wire(journal=True)
    tasks = tmp_path / "t.txt"
    tasks.write_text("echo a\n\necho b\n")
    p = shoal_cli(["run", "--connect", head.path, "--retries", "2", "--timeout", "5",
                   "--no-progress", str(tasks)], cwd=tmp_path)
    try:
        specs = head.wait_tasks(2, timeout=60)
        assert [opts_of(s) for s in specs] == [
            {"retries": 2, "timeout": 5.0, "key": line_key(1, "echo a")},
            {"retries": 2, "timeout": 5.0, "key": line_key(3, "echo b")},
        ]
        head.send([P.SHUTDOWN])
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 3
    assert err.strip().splitlines() == [f"shoal run: lost the head at {head.conn.address}: it shut down"]


def test_python_m_shoal_takes_retries_and_timeout_and_exits_3_when_the_head_is_lost(wire, tmp_path):
    head = wire()
    prog = tmp_path / "prog.py"
    prog.write_text("from shoal import futures\nprint(futures.submit(abs, -3).result())\n")
    p = shoal_cli(["--connect", head.path, "--retries", "3", "--timeout", "9", str(prog)], cwd=tmp_path)
    try:
        (spec,) = head.wait_tasks(1, timeout=60)
        assert opts_of(spec) == {"retries": 3, "timeout": 9.0}
        head.send([P.RESULTS, [[spec[0], P.OK, pickle.dumps(3), 0, None]]])
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert (p.returncode, out) == (0, "3\n"), err
    lost = wire()
    p = shoal_cli(["--connect", lost.path, str(prog)], cwd=tmp_path)
    try:
        lost.wait_tasks(1, timeout=60)
        lost.send([P.SHUTDOWN])
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 3 and err.strip() == f"shoal: lost the head at {lost.conn.address}: it shut down"
    bad = shoal_cli(["--retries", "-2", str(prog)], cwd=tmp_path)
    out, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and err.strip() == "shoal: retries must be an int >= 0, not -2"


def test_shoal_run_exits_3_at_once_when_its_local_head_is_killed(tmp_path):
    tasks = tmp_path / "t.txt"
    tasks.write_text("sleep 60\nsleep 60\nsleep 60\n")
    p = shoal_cli(["run", "-j", "2", "--no-progress", str(tasks)], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        heads: list[int] = []
        while time.monotonic() < deadline and not heads:  # the head, once the sleeps run
            procs = _descendants(p.pid)
            cmdlines = {pid: _cmdline(pid) for pid in procs}
            if any("sleep 60" in c and "shoal" not in c for c in cmdlines.values()):
                heads = [pid for pid, c in cmdlines.items() if "-m shoal.head" in c]
            time.sleep(0.1)
        assert len(heads) == 1, "the run did not start"
        words = cmdlines[heads[0]].split()
        rundir = os.path.dirname(words[words.index("--connection") + 1])
        t0 = time.monotonic()
        os.kill(heads[0], signal.SIGKILL)
        out, err = p.communicate(timeout=60)
        assert time.monotonic() - t0 < 15
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 3
    (line,) = err.strip().splitlines()
    assert line.startswith("shoal run: lost the head at ipc://") and line.endswith("exited with SIGKILL")
    assert not wait_gone(procs, 15.0), "processes of the run were left behind"
    assert not os.path.exists(rundir)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


KILLED_CLIENT = """\
import sys, time
from shoal import Command, Executor
ex = Executor(connect=sys.argv[1])
ex.submit(Command(["sh", "-c", "echo $$ > " + sys.argv[2] + ".tmp; mv " + sys.argv[2]
                   + ".tmp " + sys.argv[2] + "; exec sleep 120"]))
time.sleep(300)
"""


def test_kill_9_of_a_tcp_client_on_the_heads_host_stops_its_tasks_at_once(tmp_path):
    """A client that joined over TCP from the head's own host says which host it is on: the
    head watches its pid, so kill -9 of it stops its running command at once rather than
    after the heartbeat timeout (60 s here)."""
    path = str(tmp_path / "run.json")
    env = {**os.environ, "PYTHONPATH": ROOT}
    head = subprocess.Popen([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                             "--connection-file", path, "--heartbeat-timeout", "60"],
                            env=env, start_new_session=True)
    agent = client = None
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        agent = subprocess.Popen([PY, "-m", "shoal", "agent", "--connect", path, "--slots",
                                  "1"], env=env, start_new_session=True)
        script = tmp_path / "client.py"
        script.write_text(KILLED_CLIENT)
        pidfile = tmp_path / "cmd.pid"
        client = subprocess.Popen([PY, str(script), path, str(pidfile)], env=env)
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        cmd_pid = int(pidfile.read_text())
        client.kill()
        client.wait()
        t0 = time.monotonic()
        assert not wait_gone({cmd_pid}, 20), "the killed client's command still runs after 20 s"
        assert time.monotonic() - t0 < 20
    finally:
        for p in (client, agent, head):
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
