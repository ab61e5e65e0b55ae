"""Trace formats 3 and 4 (the agent's times as columns, shoal.trace.columns; format 4:
messages as received, open attempts kept by the reader) and the older formats.

A real traced run read back whole (every task's times, agent, cores, attempts, retries);
the agent's column builder on its own; and one run written by hand in formats 1, 2 and 3
read alike (files written by older heads stay readable).
"""

from __future__ import annotations

import math
import os
import sys
import time
from array import array
from pathlib import Path

import cloudpickle
import msgpack
import pytest

from shoal import Command, Executor, futures, trace
from shoal.trace.columns import AgentTimes, unpack_columns
from shoal.trace.store import AGENT_JOIN, END, FUNCS, RESULTS, SUBMIT, unpack_times

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests


def inc(x: int) -> int:
    return x + 1


def flaky(marker: str, fails: int) -> str:
    """Fails its first ``fails`` calls (counted in files next to ``marker``), then returns."""
    n = len([p for p in os.listdir(os.path.dirname(marker))
             if p.startswith(os.path.basename(marker))])
    open(f"{marker}.{n}", "w").close()
    if n < fails:
        raise RuntimeError(f"flaky call {n}")
    return "done"


def test_a_traced_run_read_back_whole(tmp_path: Path) -> None:
    """2,000 no-op submits (W1's shape: big RESULTS messages of Python results), commands
    of 1 and 2 cores, and a task that fails twice before it succeeds: every attempt is
    in the trace with all six times in order, the agent that ran it, its cores, its
    worker (Python) and its attempt number."""
    path = tmp_path / "run.trace"
    t0 = time.time()
    with Executor(workers=2, slots=2, trace=path) as ex:
        futs = [ex.submit(inc, i) for i in range(2000)]
        one = ex.submit(Command(["/bin/true"]))
        two = ex.options(cores=2).submit(Command(["/bin/sh", "-c", "exit 0"]))
        retried = ex.options(retries=2).submit(flaky, str(tmp_path / "m"), 2)
        assert [f.result(60) for f in futs] == list(range(1, 2001))
        assert one.result(60).returncode == 0 and two.result(60).returncode == 0
        assert retried.result(60) == "done"
        where = {f.tid: f.agent for f in [*futs, one, two, retried]}
    t1 = time.time()
    t = trace.read(path)
    assert t.header["shoal_trace"] == 4 and t.ended is not None and not t.truncated
    assert {a.tid for a in t.attempts} == set(where), "tasks missing from the trace"
    by_tid: dict[int, list[trace.Attempt]] = {}
    for a in t.attempts:
        by_tid.setdefault(a.tid, []).append(a)
    for a in t.attempts:
        times = [a.submitted, a.dispatched, a.launched, a.started, a.ended, a.received]
        assert None not in times, a
        assert times == sorted(times), f"times out of order: {a}"
        assert t0 <= a.submitted and a.received <= t1
        assert a.agent == where[a.tid], a  # where the client was told it ran
    for f in futs:
        (a,) = by_tid[f.tid]
        assert (a.attempt, a.status, a.kind, a.cores, a.note) == (1, "ok", "py", 1, None)
        assert a.name == f"{__name__}.inc" and a.worker in (0, 1)
    (c1,) = by_tid[one.tid]
    (c2,) = by_tid[two.tid]
    assert (c1.kind, c1.name, c1.cores, c1.worker) == ("cmd", "/bin/true", 1, None)
    assert (c2.name, c2.cores, c2.core_count) == ("exit", 2, 2)
    assert c2.cpus is None or len(c2.cpus) == 2  # bound to 2 CPUs where binding applies
    tries = sorted(by_tid[retried.tid], key=lambda a: a.attempt)
    assert [(a.attempt, a.status) for a in tries] == [(1, "error"), (2, "error"), (3, "ok")]
    assert "flaky call 0" in (tries[0].note or "") and "flaky call 1" in (tries[1].note or "")
    assert all(a.worker in (0, 1) for a in tries)
    s = trace.summary(t)
    assert (s["tasks"], s["attempts"], s["ok"], s["failed"]) == (2003, 2005, 2003, 0)
    assert (s["retried"], s["failed_attempts"]) == (1, 2)


def tree(d: int) -> int:
    """A task that waits on sub-tasks (it blocks: the worker finishes it later)."""
    if d == 0:
        return 1
    a, b = futures.submit(tree, d - 1), futures.submit(tree, d - 1)
    return a.result() + b.result()


def size(blob: bytes) -> bytes:
    return blob[: len(blob) // 2]


def test_format_4_in_a_real_run_blocked_tasks_and_big_messages(tmp_path: Path) -> None:
    """Tasks that block on sub-tasks (their times taken when they finish later, or kept in
    the worker), two functions, and messages too big to keep whole (their arguments and
    results: the head records them as columns): every attempt is there once, with its
    times in order."""
    path = tmp_path / "run.trace"
    big = os.urandom(300_000)
    with Executor(workers=2, slots=2, trace=path) as ex:
        trees = [ex.submit(tree, 3) for _ in range(3)]
        bigs = [ex.submit(size, big) for _ in range(3)]
        small = [ex.submit(inc, i) for i in range(300)]
        assert [f.result(60) for f in trees] == [8, 8, 8]
        assert all(f.result(60) == big[:150_000] for f in bigs)
        assert [f.result(60) for f in small] == list(range(1, 301))
        tops = {f.tid for f in [*trees, *bigs, *small]}
    t = trace.read(path)
    assert t.header["shoal_trace"] == 4 and t.ended is not None
    by_tid: dict[int, list[trace.Attempt]] = {}
    for a in t.attempts:
        by_tid.setdefault(a.tid, []).append(a)
    assert tops <= set(by_tid) and all(len(v) == 1 for v in by_tid.values())
    for a in t.attempts:
        assert a.status == "ok", a
        times = [a.submitted, a.dispatched, a.received]
        if a.tid in tops or a.worker is not None:  # (a sub-task kept in its parent's
            times[2:2] = [a.launched, a.started, a.ended]  # worker never left it)
        assert None not in times and times == sorted(times), a
    names = {a.name for a in t.attempts}
    assert {f"{__name__}.tree", f"{__name__}.size", f"{__name__}.inc"} <= names
    assert trace.summary(t)["tasks"] == len(t.attempts)


def test_agent_times_columns_stay_in_step_with_the_results() -> None:
    cols = AgentTimes()
    # a command: its own times, CPU and GPU ids
    cols.add([1.0, 2.0, 3.0, [4, 5], ["GPU-0"], None])
    # a worker's message of 3 results of which the agent passes on 2 (one was stopped)
    items = [[11, 0, b"", 1, None], [12, 0, b"", 1, None], [13, 0, b"", 1, None]]
    # launched (the agent's stamp on the spec), started, ended per item
    lse = array("d", [4.5, 5.0, 6.0, 6.5, 7.0, 8.0, 8.5, 9.0, 10.0]).tobytes()
    cols.worker_results(items, [items[0], items[2]], lse, 1, {13: (None, ["GPU-1"])})
    # a worker that sent no times, and a failure the agent reports (times unknown)
    cols.worker_results([[14, 0, b"", 1, None]], [[14, 0, b"", 1, None]], None, 0, None)
    cols.add(None)
    cols.add([7.0, 8.0])  # a short list: the rest unknown
    assert len(cols) == 6
    blob = cols.take(6)
    assert blob is not None and len(cols) == 0
    # the agent's times are its host's monotonic clock; "mono" makes them Unix time
    m = msgpack.unpackb(blob, raw=False, strict_map_key=False)
    assert abs(m["mono"] - (time.time() - time.monotonic())) < 0.5
    m["mono"] = 100.0
    assert unpack_columns(m, 6)[1][:3] == [104.5, 105.0, 106.0]
    del m["mono"]  # (format 3: Unix times as they are)
    blob = msgpack.packb(m, use_bin_type=True)
    got = unpack_times(blob, 6)
    assert got == [[1.0, 2.0, 3.0, [4, 5], ["GPU-0"], None],
                   [4.5, 5.0, 6.0, None, None, 1],
                   [8.5, 9.0, 10.0, None, ["GPU-1"], 1],
                   [None, None, None, None, None, 0],
                   [None, None, None, None, None, None],
                   [7.0, 8.0, None, None, None, None]]
    # out of step (results dropped without their times): no times rather than wrong ones
    cols.add([1.0, 2.0, 3.0, None, None, None])
    assert cols.take(2) is None and len(cols) == 0
    # a blob that is not one of n items reads as unknown times
    assert unpack_times(blob, 5) == [None] * 5
    assert unpack_columns({"n": 1, "launched": b"\x00" * 3, "se": b"", "worker": b""}, 1) is None
    assert unpack_times(b"\xc1junk", 2) == [None, None]


def _rows(tid: int, agent_times: object, statuses: object, attempts: object) -> list[object]:
    return [RESULTS, 20.0, 1, [tid, tid + 1], statuses, attempts, [11.0, 11.5], agent_times,
            None]


@pytest.mark.parametrize("fmt", [1, 2, 3])
def test_formats_1_2_and_3_read_alike(tmp_path: Path, fmt: int) -> None:
    """The same two attempts written the way each format's head and agent wrote them
    (format 4 below)."""
    per_item = [[12.0, 13.0, 14.0, [0], None, 0], [12.5, None, 15.0, None, None, None]]
    if fmt == 1:  # lists in the record
        res = _rows(7, per_item, [0, 1], [1, 1])
    elif fmt == 2:  # one blob per message, an array per item
        res = _rows(7, msgpack.packb(per_item), [0, 1], [1, 1])
    else:  # columns; statuses, attempts single values where all are the same
        nan = float("nan")  # (as format 3's agent packed them: Unix times, no "mono")
        blob = {"n": 2, "launched": array("d", [12.0, 12.5]).tobytes(),
                "se": array("d", [13.0, 14.0, nan, 15.0]).tobytes(),
                "worker": array("i", [0, -1]).tobytes(), "extra": {0: [[0], None]}}
        res = _rows(7, msgpack.packb(blob), [0, 1], 1)
    path = tmp_path / f"f{fmt}.trace"
    with open(path, "wb") as fh:
        fh.write(msgpack.packb({"shoal_trace": fmt, "t": 9.0, "pid": 1, "host": "h",
                                "run_id": "r"}))
        fh.write(msgpack.packb([[AGENT_JOIN, 9.5, 1, "a1", "node1", 2, 0, 0, "h", 2],
                                [FUNCS, {5: "mod.fn"}],
                                [SUBMIT, 10.0, [7, 8], 1, 0, 5, 1, None]]))
        fh.write(msgpack.packb([res, [END, 21.0, {"completed": 2}]]))
    t = trace.read(path)
    rows = [(a.tid, a.attempt, a.status, a.agent, a.name, a.submitted, a.dispatched,
             a.launched, a.started, a.ended, a.received, a.cpus, a.worker) for a in t.attempts]
    assert rows == [(7, 1, "ok", "a1", "mod.fn", 10.0, 11.0, 12.0, 13.0, 14.0, 20.0, [0], 0),
                    (8, 1, "error", "a1", "mod.fn", 10.0, 11.5, 12.5, None, 15.0, 20.0, None,
                     None)]
    assert not any(isinstance(x, float) and math.isnan(x) for r in rows for x in r)


def test_format_4_messages_as_received_and_open_attempts_kept_by_the_reader(
        tmp_path: Path) -> None:
    """Format 4, written by hand the way the head writes it: SUBMIT and RESULTS messages
    as they came (the agent's times monotonic, with their offset), TASKS as DISPATCH
    records; the reader rebuilds each attempt: stale results dropped, a task dispatched
    again while open REVOKED, a close by the head, one still open at END UNFINISHED, and
    a RESULTS record of columns (a message too big to keep whole)."""
    from shoal.trace.store import ATTEMPT, DISPATCH, RECEIVED, SUBMITTED, _raw

    lost = 4  # (shoal.transport.protocol.LOST)

    pack = msgpack.Packer(use_bin_type=True).pack
    spec = [[7, 0, 5, b"args", [], 1, -1], [8, 0, 5, b"args", [], 1, -1],
            [9, 2, 0, {"argv": ["/bin/sh", "-c", "mpi_hello x"]}, [], 2, -1, None,
             {"ranks": 2, "gpus": 1}], [10, 0, 5, b"", [], 1, -1]]
    sub = pack([3, spec, {5: b"pickled"}, 0, {5: "mod.fn"}])
    cols = AgentTimes()
    cols.add([12.0, 13.0, 14.0, [0], None, 0])  # (monotonic: the offset below adds 1000)
    cols.add([12.5, None, 15.0, None, None, None])
    blob = msgpack.unpackb(cols.take(2), strict_map_key=False)
    blob["mono"] = 1000.0
    res = pack([5, [[7, 0, b"\x80", 1, None], [8, 1, b"err", 1, {"why": "boom"}]],
                pack(blob)])
    stale = pack([5, [[7, 0, b"", 1, None]], pack({"n": 1, "launched": b"\0" * 8,
                                                   "se": b"\0" * 16, "worker": b"\0" * 4})])
    path = tmp_path / "f4.trace"
    with open(path, "wb") as fh:
        fh.write(pack({"shoal_trace": 4, "t": 9.0, "pid": 1, "host": "h", "run_id": "r"}))
        fh.write(pack([[AGENT_JOIN, 9.5, 1, "a1", "node1", 2, 0, 0, "h", 2],
                       [AGENT_JOIN, 9.6, 2, "a2", "node2", 2, 0, 0, "h", 3]]))
        rows = [_raw(SUBMITTED, 10.0, 3, sub), [DISPATCH, 11.0, 1, [7, 8, 9, 10], 1]]
        # a turn's array as flush writes it: raw records are (prefix, body) written as is
        fh.write(b"\x92" + rows[0][0] + rows[0][1] + pack(rows[1]))
        raw = _raw(RECEIVED, 20.0, 1, res)
        fh.write(b"\x91" + raw[0] + raw[1])
        raw = _raw(RECEIVED, 20.5, 1, stale)  # attempt 1 of 7 is closed: dropped
        fh.write(b"\x91" + raw[0] + raw[1])
        fh.write(pack([[DISPATCH, 21.0, 2, [10], 2],   # 10 again, its attempt 1 open: revoked
                       [ATTEMPT, 9, 1, lost, 1, None, 22.0, None, "agent lost"],
                       [ATTEMPT, 9, 1, lost, 1, None, 22.5, None, "again: dropped"],
                       [ATTEMPT, 11, None, 2, 0, None, 22.6, None, "never sent: dropped"],
                       [RESULTS, 23.0, 2, [10], 0, 3, None, None, None],  # not attempt 2
                       [END, 30.0, {}]]))
    t = trace.read(path)
    got = [(a.tid, a.attempt, a.status, a.agent, a.owner, a.kind, a.name, a.cores, a.gpus,
            a.ranks, a.submitted, a.dispatched, a.launched, a.started, a.ended, a.received,
            a.cpus, a.note) for a in t.attempts]
    assert got == [
        (7, 1, "ok", "a1", 3, "py", "mod.fn", 1, 0, 0, 10.0, 11.0, 1012.0, 1013.0, 1014.0,
         20.0, [0], None),
        (8, 1, "error", "a1", 3, "py", "mod.fn", 1, 0, 0, 10.0, 11.0, 1012.5, None, 1015.0,
         20.0, None, "boom"),
        (10, 1, "revoked", "a1", 3, "py", "mod.fn", 1, 0, 0, 10.0, 11.0, None, None, None,
         21.0, None, "given up by the head"),
        (9, 1, "lost", "a1", 3, "cmd", "mpi_hello", 2, 1, 2, 10.0, 11.0, None, None, None,
         22.0, None, "agent lost"),
        (10, 2, "unfinished", "a2", 3, "py", "mod.fn", 1, 0, 0, 10.0, 21.0, None, None, None,
         30.0, None, "the head stopped")]
