"""A warm Python worker: runs many tasks in one process, one at a time.

Each task runs in its own greenlet. When a task waits on sub-tasks it submitted
(``future.result()``, ``shoal.wait``, ``as_completed``), its greenlet parks and the
worker goes on with other tasks, so a blocked task never holds the worker's core: a
tree of any depth completes on a single worker.

Sub-tasks run in the process of the parent that waits for them when they can (SCOOP's
lesson; Cilk's work-first order): a task keeps its first LOCAL_KEEP plain sub-tasks of
each burst in this worker's local deque, and the worker runs the newest first whenever
its tasks block. What waits there longer than LOCAL_AGE_S -- the oldest, near the root
of a tree, so the biggest pieces -- goes out to the agent for other workers and nodes,
as do all further sub-tasks of a burst. Kept sub-tasks never cost a message; their
arguments and results are still pickled, so a task sees the same values either way.

Messages with the agent (all batched):
  in:  TASKS [specs, funcs], RESULTS [results of sub-tasks], CANCEL [key, tids] (drop these:
       the agent saw under the shared lock that they had not started, and they cannot
       start before this message is read, see agent.pool; nothing is sent for them),
       RETURN (drop every task not started and say which: the agent drains), SHUTDOWN
  out: RESULTS [results], SUBMIT [sub-tasks, funcs], CREDIT [n, blocked tids, resumed tids],
       RETURN [tids]

The agent sees which task runs here, and since when, in shared memory (``running_slot``:
an int64 task id and a float64 monotonic start time at ``slot_offset``): it enforces time
limits and stops cancelled tasks by killing this process, whatever the task is doing. The
byte after them is the agent's "give back" flag: set when it drains, the worker looks at it
before it starts each queued task (a message would wait behind the running task), drops its
queue and says which tasks it dropped (RETURN), so none is both handed back and run.
"""

from __future__ import annotations

import concurrent.futures as cf
import heapq
import math
import os
import pickle
import signal
import struct
import sys
import time
import traceback
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

import greenlet
import zmq

from shoal._sys import set_parent_death_signal
from shoal.agent import limits
from shoal.agent.failures import failure_info
from shoal.agent.resources import gpu_env
from shoal.task import context
from shoal.task.codec import EncodeError, Encoder, dumps
from shoal.task.errors import exception_payload
from shoal.task.future import ShoalFuture, deliver
from shoal.transport import protocol as P
from shoal.transport.session import retry_soon

_dumps = pickle.dumps
_pack_into = struct.pack_into
_unpack_q = struct.Struct("q").unpack_from
# in the shared slot (agent.pool): the last queued task started, and the agent's cancel marks
_STARTED, _STOP_AT, _CANCEL_KEY, _NO_STOP = 24, 32, 40, (1 << 63) - 1
_monotonic = time.monotonic
_NAN = float("nan")  # traced: a start not known

FLUSH_AFTER_S = 0.002     # a result waits at most this long for company before it is sent
FLUSH_COUNT = 256
TRUST_RUNS = 8  # runs of a function before its mean run time may delay a result
LOCAL_KEEP = 2            # sub-tasks per burst a task keeps to run in this process
LOCAL_AGE_S = 0.001       # a kept sub-task waiting longer than this goes out to the agent


class WorkerContext:
    """State of one worker process; also the owner of futures of sub-tasks."""

    def __init__(self, sock: zmq.Socket, codec: P.Codec) -> None:
        self.sock = sock
        self.codec = codec
        self.encoder = Encoder(0)   # origin comes with the agent's WELCOME
        self.capacity = 0           # no window before WELCOME
        self.run_slots = 1          # slots of the run when this agent joined (nested map chunks)
        self.sent_window = -1
        self.running_slot: Any = None   # shared memory: the task id running now (for the agent)
        self.slot_offset = 0
        self.stats: dict[int, list[float]] = {}  # per function (and kind): [runs, seconds]
        self.seen: dict[int, list[float]] = {}   # the same, since this worker started
        self.queue: deque[list[Any]] = deque()
        self.runnable: deque[greenlet.greenlet] = deque()
        self.funcs: dict[int, Callable[..., Any]] = {}
        self.func_blobs: dict[int, bytes] = {}
        self.children: dict[int, ShoalFuture] = {}
        self.out_results: list[list[Any]] = []
        self.out_submit: list[list[Any]] = []
        self.events: list[int] = []   # in order: tid = blocked, -tid = resumed
        self.first_unsent = 0.0
        self.running = True
        self.hub = greenlet.getcurrent()
        self.task_of: dict[greenlet.greenlet, int] = {}
        self.blocked: set[greenlet.greenlet] = set()
        self.timers: list[tuple[float, int, greenlet.greenlet]] = []
        self.t0_of: dict[int, float] = {}   # agent task -> when it started (for time limits)
        # kept sub-tasks: (time kept, spec, agent task on whose behalf it runs)
        self.local: deque[tuple[float, list[Any], int]] = deque()
        self.local_tids: set[int] = set()    # kept sub-tasks started here
        self.slot_of: dict[greenlet.greenlet, int] = {}  # what the agent is told runs
        self.burst = 0              # sub-tasks the running greenlet submitted since switched in
        self.trace = False          # the agent asked for times: results carry start and end
        # traced: launched (the agent's stamp, T_LAUNCH), started, ended of each of
        # out_results: the monotonic reads each task takes anyway (run-time estimates, time
        # limits), so the trace reads no clock; a task that blocked keeps its stamp here
        self.out_times = array("d")
        self.launch_of: dict[int, float] = {}
        self.lock: Any = None       # shared with the agent (agent.pool): claims of queued tasks
        self.cancel_seen = 0        # the last CANCEL of queued tasks read
        self.owner: int | None = None  # the client of its tasks (the agent binds a worker
        # to one client; shoal.shared files constants per client)

    # ---- sending ------------------------------------------------------------------
    def _send(self, msg: list[Any]) -> None:
        self.sock.send_multipart(self.codec.encode(msg), copy=False)

    def flush(self) -> None:
        if self.out_submit:
            subs, self.out_submit = self.out_submit, []
            self._send([P.SUBMIT, subs, self.encoder.take_funcs(), 0])
        if self.out_results:
            res, self.out_results = self.out_results, []
            stats, self.stats = self.stats, {}
            if self.trace:  # launched, started, ended as bytes (the agent adds the worker)
                times, self.out_times = self.out_times, array("d")
                self._send([P.RESULTS, res, stats, times.tobytes()])
            else:
                self._send([P.RESULTS, res, stats])
        self._credit()

    def _credit(self) -> None:
        """Tell the agent this worker's window and which tasks blocked or resumed."""
        if not self.capacity:
            return
        if self.capacity != self.sent_window or self.events:
            self.sent_window = self.capacity
            ev, self.events = self.events, []
            self._send([P.CREDIT, self.capacity, ev])

    # ---- receiving ----------------------------------------------------------------
    def _recv_all(self, timeout_ms: int) -> None:
        sock = self.sock
        if not sock.poll(timeout_ms):
            return
        while True:
            try:
                sig, body = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:
                continue  # wrong frame count: ignore
            try:
                msg = self.codec.decode(sig, body)
            except P.AuthError:
                print("shoal worker: dropped a message that failed authentication",
                      file=sys.stderr)
                continue
            kind = msg[0]
            if kind == P.WELCOME:  # (again after a new head: the wrap of sub-tasks stays)
                self.encoder = Encoder(msg[1]["origin"], self.encoder.wrap)
                self.capacity = 1 + max(0, int(msg[1]["prefetch"]))
                self.trace = bool(msg[1].get("trace"))
                self.run_slots = int(msg[1].get("slots") or 1)
            elif kind == P.TASKS:
                specs = msg[1]
                if msg[2]:
                    self.func_blobs.update(msg[2])
                if specs and self.owner is None:  # the client whose tasks this worker runs
                    self.owner = specs[0][P.T_OWNER] if len(specs[0]) > P.T_OWNER else None
                self.queue.extend(specs)
            elif kind == P.RESULTS:
                children = self.children
                for item in msg[1]:   # [tid, status, payload, agent, attempts]
                    fut = children.pop(item[0], None)
                    if fut is not None:
                        deliver(fut, item[1], item[2])
            elif kind == P.CANCEL:
                self._drop_queued(set(msg[2]))
                if msg[1] and self.lock is not None:
                    self.cancel_seen = msg[1]
                    self._release_stop()
            elif kind == P.RETURN:
                self._give_back()
            elif kind == P.SHUTDOWN:
                self.running = False
                return

    # ---- running ------------------------------------------------------------------
    def loop(self) -> None:
        while self.running:
            busy = bool(self.queue or self.runnable or self.local)
            if not busy:
                self.flush()
                timeout = 1000
                if self.timers:
                    timeout = max(0, int((self.timers[0][0] - time.monotonic()) * 1000) + 1)
                self._recv_all(timeout)
            else:
                self._recv_all(0)
            self._fire_timers()
            if self.local and time.monotonic() - self.local[0][0] > LOCAL_AGE_S:
                self._export(time.monotonic() - LOCAL_AGE_S)
            # resumed parents first: they free memory and unblock their own waiters;
            # then kept sub-tasks, newest first (depth first, like the caller would)
            for _ in range(64):
                self.burst = 0
                if self.runnable:
                    g = self.runnable.popleft()
                    if not g.dead:
                        self._resume(g)
                elif self.local:
                    _, spec, root = self.local.pop()
                    self.local_tids.add(spec[0])
                    self._start(spec, root)
                elif self.queue:
                    if self.running_slot is not None and self.running_slot[self.slot_offset + 16]:
                        self._give_back()
                        break
                    if self.lock is not None and not self._claim(self.queue[0]):
                        continue  # the agent cancelled it (or one before it): look again
                    if self.out_results and self._maybe_slow(self.queue[0]):
                        self.flush()  # finished results must not wait behind a long task
                    self._start(self.queue.popleft())
                else:
                    break
                if self.out_results and (
                    len(self.out_results) >= FLUSH_COUNT
                    or time.monotonic() - self.first_unsent > FLUSH_AFTER_S
                ):
                    self.flush()

    def _claim(self, spec: list[Any]) -> bool:
        """Record that the queued task ``spec`` starts now, unless the agent is cancelling
        it or one queued before it (STOP_AT, see agent.pool): then read that CANCEL first
        (it is on its way) and return False."""
        slot, off, lock = self.running_slot, self.slot_offset, self.lock
        seq = spec[P.T_SEQ]
        lock.acquire()
        if seq < _unpack_q(slot, off + _STOP_AT)[0]:
            _pack_into("q", slot, off + _STARTED, seq)
            lock.release()
            return True
        lock.release()
        while self.running and not self._release_stop():
            self._recv_all(10)
        return False

    def _release_stop(self) -> bool:
        """Lift STOP_AT once the last CANCEL the agent numbered was read (True then)."""
        slot, off, lock = self.running_slot, self.slot_offset, self.lock
        lock.acquire()
        try:
            if self.cancel_seen >= _unpack_q(slot, off + _CANCEL_KEY)[0]:
                _pack_into("q", slot, off + _STOP_AT, _NO_STOP)
                return True
            return False
        finally:
            lock.release()

    def _maybe_slow(self, spec: list[Any]) -> bool:
        """False only for a function that ran here TRUST_RUNS times, in under FLUSH_AFTER_S
        on average: results of short tasks still travel together."""
        st = self.seen.get(spec[2] if spec[1] == P.PY else -spec[2])
        return st is None or st[0] < TRUST_RUNS or st[1] > FLUSH_AFTER_S * st[0]

    def _give_back(self) -> None:
        """The agent drains: drop every queued task not started and say which."""
        if self.running_slot is not None:
            self.running_slot[self.slot_offset + 16] = 0
        self._send([P.RETURN, self._drop_queued(None)])

    def _drop_queued(self, tids: set[int] | None) -> list[int]:
        """Forget queued tasks not started (those in ``tids``, or all); their ids."""
        if tids is None:
            dropped = [s[0] for s in self.queue]
            self.queue.clear()
            return dropped
        dropped = [s[0] for s in self.queue if s[0] in tids]
        if dropped:
            self.queue = deque(s for s in self.queue if s[0] not in tids)
        return dropped

    def _export(self, older_than: float) -> None:
        """Send kept sub-tasks kept since before ``older_than`` out to the agent."""
        local = self.local
        while local and local[0][0] <= older_than:
            self.out_submit.append(local.popleft()[1])
        self.flush()

    def _start(self, spec: list[Any], root: int = 0) -> None:
        tid = spec[0]
        g = greenlet.greenlet(self._run)
        self.task_of[g] = tid
        # A kept sub-task runs on behalf of the agent's task that spawned it: if this
        # process dies now, that task is the one the agent reports lost.
        slot_tid = self.slot_of[g] = root or tid
        t0 = _monotonic()
        slot = self.running_slot
        if slot is not None:  # a kept sub-task shows its root, started when the root did
            _pack_into("qd", slot, self.slot_offset, slot_tid,
                       self.t0_of.get(root, t0) if root else t0)
        g.switch(spec)
        if slot is not None:
            _pack_into("q", slot, self.slot_offset, 0)
        if not g.dead:  # it waits on sub-tasks: remember since when it runs
            if not root:
                self.t0_of[tid] = t0
                if self.trace:
                    self.launch_of[tid] = spec[P.T_LAUNCH] if len(spec) > P.T_LAUNCH else _NAN
        else:  # finished without blocking: a clean run-time sample for the agent
            del self.task_of[g]
            del self.slot_of[g]
            t1 = _monotonic()
            dt = t1 - t0
            if self.trace and not root:  # its result is the last of out_results (_result)
                out = self.out_times
                out.append(spec[P.T_LAUNCH] if len(spec) > P.T_LAUNCH else _NAN)
                out.append(t0)
                out.append(t1)
            key = spec[2] if spec[1] == P.PY else -spec[2]
            st = self.stats.get(key)
            if st is None:
                self.stats[key] = [1, dt]
            else:
                st[0] += 1
                st[1] += dt
            st = self.seen.get(key)
            if st is None:
                self.seen[key] = [1, dt]
            else:
                st[0] += 1
                st[1] += dt

    def _resume(self, g: greenlet.greenlet) -> None:
        tid = self.task_of.get(g)
        slot_tid = self.slot_of.get(g, 0)
        if g in self.blocked:
            self.blocked.discard(g)
            if slot_tid == tid:  # the agent knows this task (not a kept sub-task)
                self.events.append(-tid)
        slot = self.running_slot
        if slot is not None:
            _pack_into("qd", slot, self.slot_offset, slot_tid,
                       self.t0_of.get(slot_tid, time.monotonic()))
        g.switch()
        if slot is not None:
            _pack_into("q", slot, self.slot_offset, 0)
        if g.dead:
            self.task_of.pop(g, None)
            if self.slot_of.pop(g, None) == tid:
                if self.trace:  # (as in _start: its result is the last of out_results)
                    out = self.out_times
                    out.append(self.launch_of.pop(tid, _NAN))
                    out.append(self.t0_of.get(tid, _NAN))
                    out.append(_monotonic())
                self.t0_of.pop(tid, None)

    def _run(self, spec: list[Any]) -> None:
        tid, kind, fid, payload = spec[0], spec[1], spec[2], spec[3]
        if len(spec) > P.T_OPTS and spec[P.T_OPTS] and "gpu_ids" in spec[P.T_OPTS]:
            # the devices the agent gave this task (a worker keeps the first ones it gets:
            # CUDA reads these variables once, when it is initialized in the process)
            os.environ.update(gpu_env(spec[P.T_OPTS]["gpu_ids"]))
        try:
            fn = self.funcs.get(fid)
            if fn is None:
                fn = self._load_func(fid)
            if kind == P.PY:
                args, kwargs = pickle.loads(payload)
                value = fn(*args, **kwargs)
            else:  # CHUNK
                value = [fn(*a) for a in pickle.loads(payload)]
        except BaseException as exc:  # noqa: BLE001 - everything a task raises goes back
            if isinstance(exc, greenlet.GreenletExit):
                raise
            tb = traceback.format_exc()
            self._result(tid, P.ERR, exception_payload(exc, tb), failure_info(exc))
            return
        try:
            out = _dumps(value, protocol=5)
        except Exception:  # noqa: BLE001
            try:
                out = dumps(value)
            except Exception as exc:  # noqa: BLE001
                err = TypeError(f"the result of the task cannot be sent back: {exc}")
                self._result(tid, P.ERR, exception_payload(err, ""), failure_info(err))
                return
        cap = limits.max_result
        if cap is not None and len(out) > cap:  # refused here, not carried to the client
            what = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
            if kind != P.PY:
                what = f"{what} (a chunk of {len(value)} calls)"
            err = limits.result_too_large(what, len(out), cap)
            del out, value
            self._result(tid, P.ERR, exception_payload(err, ""), failure_info(err))
            return
        self._result(tid, P.OK, out)

    def _load_func(self, fid: int) -> Callable[..., Any]:
        blob = self.func_blobs.pop(fid, None)
        if blob is None:
            raise RuntimeError(f"function {fid:#x} never reached this worker")
        fn = pickle.loads(blob)
        self.funcs[fid] = fn
        return fn

    def _result(self, tid: int, status: int, payload: bytes,
                info: dict[str, Any] | None = None) -> None:
        if tid in self.local_tids:  # a kept sub-task: its parent is in this process
            self.local_tids.discard(tid)
            fut = self.children.pop(tid, None)
            if fut is not None:
                deliver(fut, status, payload)
            return
        if not self.out_results:
            self.first_unsent = time.monotonic()
        self.out_results.append([tid, status, payload, None, info])

    # ---- sub-tasks ----------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ShoalFuture:
        from shoal.task.command import Command

        enc = self.encoder
        try:
            if isinstance(fn, Command):
                spec = enc.command(fn, [])
            else:
                spec = enc.call(fn, args, kwargs, [], 1)
        except (EncodeError, ValueError) as exc:
            fut = ShoalFuture(enc.next_tid(), self)
            fut.set_exception(exc)
            return fut
        return self._submitted(spec, fn)

    def _submitted(self, spec: list[Any], fn: Any) -> ShoalFuture:
        """The future of a sub-task: kept here (the first LOCAL_KEEP of a burst of Python
        calls or chunks) or on its way to the agent."""
        fut = ShoalFuture(spec[0], self)
        self.children[spec[0]] = fut
        g = greenlet.getcurrent()
        self.burst += 1
        if spec[1] != P.CMD and self.burst <= LOCAL_KEEP and g in self.slot_of:
            self.funcs.setdefault(spec[2], fn)
            self.local.append((time.monotonic(), spec, self.slot_of[g]))
        else:
            self.out_submit.append(spec)
        return fut

    def map(self, fn: Callable[..., Any], *iterables: Any, timeout: float | None = None,
            chunksize: int | None = None) -> Any:
        """``Executor.map`` inside a task. ``chunksize=None`` groups items as the client's
        map does (about four chunks per slot of the run), so a nested map of tiny calls
        costs a few sub-tasks, not one per item; ``chunksize=1`` submits one per item."""
        items = list(zip(*iterables, strict=False))
        if chunksize is None:
            chunksize = max(1, math.ceil(len(items) / (4 * max(1, self.run_slots))))
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        if chunksize == 1:
            futs = [self.submit(fn, *args) for args in items]
        else:
            futs = [self._submit_chunk(fn, items[i:i + chunksize])
                    for i in range(0, len(items), chunksize)]
        deadline = None if timeout is None else time.monotonic() + timeout

        def results() -> Any:
            try:
                for f in futs:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if chunksize == 1:
                        yield f.result(left)
                    else:
                        yield from f.result(left)
            finally:  # stopped early (error, time-out, close): drop what was not sent yet
                rest = [f for f in futs if not f.done()]
                if rest:
                    self._cancel(rest)

        return results()

    def _submit_chunk(self, fn: Callable[..., Any], items: list[tuple[Any, ...]]) -> ShoalFuture:
        """One sub-task calling ``fn`` on each of ``items`` (its value: their results)."""
        try:
            spec = self.encoder.chunk(fn, items, 1)
        except (EncodeError, ValueError) as exc:
            fut = ShoalFuture(self.encoder.next_tid(), self)
            fut.set_exception(exc)
            return fut
        return self._submitted(spec, fn)

    def _started(self, futs: list[ShoalFuture]) -> bool:
        """``running()`` of a sub-task: known for those kept and started in this process
        (a sub-task that left it is not asked after: False)."""
        return futs[0].tid in self.local_tids

    def _cancel(self, futs: list[ShoalFuture], queued_only: bool = True) -> bool:
        # Sub-tasks not yet sent can be dropped here; sent ones are owned by the head.
        tids = {f.tid for f in futs}
        before = len(self.out_submit) + len(self.local)
        self.out_submit = [s for s in self.out_submit if s[0] not in tids]
        self.local = deque(e for e in self.local if e[1][0] not in tids)
        if len(self.out_submit) + len(self.local) != before:
            for t in tids:
                self.children.pop(t, None)
            return True
        return False

    def _block(self, futs: list[cf.Future], timeout: float | None, return_when: str) -> None:
        """Park the calling task until ``futs`` satisfy ``return_when`` (or timeout)."""
        g = greenlet.getcurrent()
        if g is self.hub or g not in self.task_of:
            # Not inside a task greenlet (e.g. module import): drive the loop here, with
            # every kept sub-task sent out (nothing runs them while we wait here).
            if self.local:
                self._export(float("inf"))
            deadline = None if timeout is None else time.monotonic() + timeout
            while not _satisfied(futs, return_when):
                if deadline is not None and time.monotonic() >= deadline:
                    return
                self.flush()
                self._recv_all(10)
            return
        if _satisfied(futs, return_when):
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        woken = [False]

        def wake(_f: Any = None) -> None:
            if not woken[0]:
                woken[0] = True
                self.runnable.append(g)

        for f in futs:
            if not f.done():
                f.add_done_callback(wake)
        if deadline is not None:
            heapq.heappush(self.timers, (deadline, id(g), g))
            if self.local:  # a kept sub-task run here could outlast the wait's time limit
                self._export(float("inf"))
        known = self.slot_of.get(g) == self.task_of[g]
        while True:
            self.blocked.add(g)
            if known:
                self.events.append(self.task_of[g])
            if self.out_submit or not self.local:
                self.flush()  # sub-tasks must leave before we wait on them
            # else: this worker goes on with kept sub-tasks; the agent hears of the
            # blocked task with the next flush (it would only send us more work now)
            self.hub.switch()
            if _satisfied(futs, return_when):
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            woken[0] = False
            for f in futs:
                if not f.done():
                    f.add_done_callback(wake)

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, _, g = heapq.heappop(self.timers)
            if g in self.blocked and g not in self.runnable:
                self.runnable.append(g)


def _satisfied(futs: list[cf.Future], return_when: str) -> bool:
    if return_when == cf.ALL_COMPLETED:
        return all(f.done() for f in futs)
    if return_when == cf.FIRST_EXCEPTION:
        return all(f.done() for f in futs) or any(
            f.done() and not f.cancelled() and f.exception() is not None for f in futs
        )
    return any(f.done() for f in futs)


def worker_main(endpoint: str, key: bytes, ident: bytes,
                sys_path: list[str] | None = None, running_slot: Any = None,
                slot_offset: int = 0, lock: Any = None) -> None:
    """Entry point of a worker process (forked by its agent)."""
    # The agent's handlers came with the fork: a worker dies of SIGTERM (its parent-death
    # signal) at once, and Ctrl-C belongs to the agent, which stops its workers in order.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCONT, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)  # the agent's signal pipe is the agent's alone
    set_parent_death_signal()
    if str(os.getppid()) != os.environ.pop("SHOAL_AGENT_PID", str(os.getppid())):
        os._exit(0)  # the agent died before the parent-death signal was armed
    if sys_path:
        for p in reversed(sys_path):
            if p not in sys.path:
                sys.path.insert(0, p)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, ident)
    sock.setsockopt(zmq.LINGER, 2000)
    retry_soon(sock, endpoint)  # the agent binds once its workers are forked
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(endpoint)
    codec = P.Codec(key)
    wc = WorkerContext(sock, codec)
    wc.running_slot, wc.slot_offset = running_slot, slot_offset
    if running_slot is not None:
        wc.lock = lock
    context.enter_worker(wc)
    _patch_stdlib_waits()
    try:
        wc._send([P.HELLO, "worker", {"pid": os.getpid()}])
        wc.loop()
        wc.flush()
    except KeyboardInterrupt:
        pass
    finally:
        # told to stop: nobody waits for what is still queued (the agent stops too)
        sock.close(linger=0 if not wc.running else 2000)
        ctx.term()
        os._exit(0)


def _patch_stdlib_waits() -> None:
    """Make ``concurrent.futures.wait/as_completed`` in tasks yield the worker too."""
    from shoal.task import waiting

    cf.wait = waiting.wait
    cf.as_completed = waiting.as_completed
