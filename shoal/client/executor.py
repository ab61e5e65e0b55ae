"""The client API: :class:`Executor`, a real ``concurrent.futures.Executor``.

``submit`` only encodes the call and appends it to a pending list; one I/O thread per
executor sends everything pending as one SUBMIT message and resolves futures from
RESULTS messages, so neither direction costs a round trip or a message per task.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import dataclasses
import itertools
import math
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import zmq

from shoal.client.command import Command
from shoal.client.encode import EncodeError, Encoder
from shoal.client.future import ShoalFuture, deliver
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection

SCHEDULES = ("dynamic", "static")
HEAD_SILENCE_S = 30.0

_live: weakref.WeakSet[Executor] = weakref.WeakSet()


class ExecutorError(RuntimeError):
    """The runtime behind an executor failed (the head stopped or cannot be reached)."""


@dataclasses.dataclass(frozen=True)
class AgentInfo:
    """An agent (one per node) connected to the head; ``name`` is what placement takes."""

    name: str
    host: str
    slots: int
    pid: int = 0


class Executor(cf.Executor):
    """Run Python calls and commands as tasks on a shoal runtime.

    ``Executor()`` is the embedded local default: a head and one agent on this machine
    with one warm worker per core, stopped and cleaned up by :meth:`shutdown`, on exit,
    and when this process dies. ``Executor(connect="run.json")`` joins a running head
    (see ``shoal head`` and ``shoal agent``) instead.

    :param workers: warm Python workers of the local agent (default: one per core).
    :param slots: cores of the local agent (default: ``workers``, or the core count).
    :param schedule: ``"dynamic"`` (tasks pulled as slots free up) or ``"static"`` (each
        ``map`` is split into contiguous blocks, one per slot, up front).
    :param prefetch: tasks queued per slot beyond the one running (dynamic schedule).
    :param connect: path of a connection file written by ``shoal head``.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        slots: int | None = None,
        schedule: str = "dynamic",
        prefetch: int = 1,
        connect: str | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
        if workers is not None and workers < 0:
            raise ValueError("workers must be >= 0")
        self._static = schedule == "static"
        self._cluster = None
        if connect is None:
            from shoal.launch.local import LocalCluster

            self._cluster = LocalCluster(workers=workers, slots=slots, prefetch=prefetch)
            conn = self._cluster.connection
            self._slots = self._cluster.slots
        else:
            conn = Connection.read(connect)
            self._slots = 0
        self._conn = conn
        self._codec = P.Codec(conn.key)
        self._lock = threading.Lock()
        self._pending: list[list[Any]] = []
        self._pending_static: list[list[Any]] = []
        self._futures: dict[int, ShoalFuture] = {}
        self._agent_names: dict[int, str] = {}
        self._requests: list[tuple[list[Any], threading.Event, list[Any]]] = []
        self._req_ids = itertools.count(1)
        self._waiting_replies: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._shutdown = False
        self._closed = False
        self._error: BaseException | None = None
        self._io_sleeping = False
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._welcome = threading.Event()
        self._encoder: Encoder | None = None
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.IDENTITY, f"client-{os.getpid()}-{id(self):x}".encode())
        self._sock.setsockopt(zmq.SNDHWM, 0)
        self._sock.setsockopt(zmq.RCVHWM, 0)
        self._sock.setsockopt(zmq.LINGER, 1000)
        # the local head binds while we connect: retry soon, not after zmq's default 100 ms
        self._sock.setsockopt(zmq.RECONNECT_IVL, 10)
        self._sock.connect(conn.address)
        self._thread = threading.Thread(target=self._io_loop, name="shoal-client-io", daemon=True)
        self._thread.start()
        if not self._welcome.wait(start_timeout):
            self._terminate()
            where = "the local head" if self._cluster else f"the head at {conn.address}"
            raise ExecutorError(f"no answer from {where} within {start_timeout:.0f} s")
        if self._error is not None:
            self._terminate()
            raise self._error
        _live.add(self)

    # ---- public API ---------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any] | Command, /, *args: Any, **kwargs: Any) -> ShoalFuture:
        """Schedule ``fn(*args, **kwargs)`` (or a :class:`Command`); returns its future."""
        return self._submit(fn, args, kwargs, (), 1, None)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int | None = None,
    ) -> Iterator[Any]:
        """Like :meth:`concurrent.futures.Executor.map`; results in order.

        ``chunksize=None`` groups items so each slot gets about four chunks (what
        ``multiprocessing.Pool.map`` does); ``chunksize=1`` sends one task per item.
        """
        return self._map(fn, iterables, timeout, chunksize, (), 1, None)

    def options(
        self,
        *,
        after: Sequence[cf.Future] = (),
        cores: int = 1,
        agent: str | None = None,
        prefer: str | None = None,
    ) -> _Options:
        """Submit with options: ``ex.options(after=[f1, f2], cores=2).submit(fn, x)``.

        ``after``: futures of this executor that must succeed first; if one fails or is
        cancelled, the task is not run and its future raises :class:`DependencyError`.
        ``agent``: run only on the agent of that name (see :meth:`agents`); the task
        fails if no such agent is connected and is lost if it leaves.
        ``prefer``: run on that agent when it has room, elsewhere only when another
        agent would otherwise idle (e.g. the node that holds the task's input files).
        """
        if agent is not None and prefer is not None:
            raise ValueError("give agent= or prefer=, not both")
        place = [agent, True] if agent is not None else [prefer, False] if prefer is not None else None
        return _Options(self, tuple(after), cores, place)

    def agents(self, timeout: float = 10.0) -> list[AgentInfo]:
        """The agents connected to the head now (one per node), in the order they joined."""
        infos = self._request([P.AGENTS], timeout)[0]
        with self._lock:
            for a in infos:
                self._agent_names[a["num"]] = a["name"]
        return [AgentInfo(a["name"], a["host"], a["slots"], a["pid"]) for a in infos]

    def _agent_name(self, num: int) -> str | None:
        name = self._agent_names.get(num)
        # (not from the I/O thread, e.g. in a done callback: it answers requests itself)
        if name is None and not self._closed and threading.current_thread() is not self._thread:
            try:
                self.agents()
            except ExecutorError:
                return None
            name = self._agent_names.get(num)
        return name

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._shutdown and self._closed:
                return
            self._shutdown = True
        if cancel_futures:
            futs = [f for f in list(self._futures.values()) if not f.done()]
            if futs:
                self._cancel(futs)
                for f in futs:
                    if f._state == "PENDING" and f.tid not in self._futures:
                        cf.Future.cancel(f)
                        f.set_running_or_notify_cancel()
        if wait:
            outstanding = [f for f in list(self._futures.values()) if not f.done()]
            if outstanding:
                cf.wait(outstanding)
            self._terminate()
        else:
            threading.Thread(target=self._finish_later, daemon=True).start()

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        """Counters of the head: agents, slots, queued/live/completed tasks."""
        return self._request([P.STATS], timeout)[0]

    @property
    def slots(self) -> int:
        """Cores known to the head when this executor joined (or of the local agent)."""
        return self._slots

    # ---- submission internals -------------------------------------------------------------
    def _submit(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                after: tuple[cf.Future, ...], cores: int, place: list[Any] | None) -> ShoalFuture:
        deps, failed = _dep_ids(self, after)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._error is not None:
                raise self._error
            enc = self._encoder
            try:
                if isinstance(fn, Command):
                    if args or kwargs:
                        raise TypeError("a Command takes no arguments")
                    spec = enc.command(fn, deps)
                else:
                    spec = enc.call(fn, args, kwargs, deps, cores)
            except (EncodeError, ValueError) as exc:
                fut = ShoalFuture(enc.next_tid(), self)
                fut.set_exception(exc)
                return fut
            fut = ShoalFuture(spec[0], self)
            if failed is not None:
                fut.set_exception(failed)
                return fut
            if place is not None:
                spec.append(place)
            self._futures[spec[0]] = fut
            (self._pending_static if self._static else self._pending).append(spec)
            wake = self._io_sleeping
            self._io_sleeping = False
        if wake:
            os.eventfd_write(self._efd, 1)
        return fut

    def _map(self, fn: Callable[..., Any], iterables: tuple[Iterable[Any], ...],
             timeout: float | None, chunksize: int | None,
             after: tuple[cf.Future, ...], cores: int, place: list[Any] | None) -> Iterator[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        items = list(zip(*iterables, strict=False))
        if chunksize is None:
            chunksize = max(1, math.ceil(len(items) / (4 * max(1, self._slots))))
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        deps, failed = _dep_ids(self, after)
        futs: list[ShoalFuture] = []
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            enc = self._encoder
            out = self._pending_static if self._static else self._pending
            for start in range(0, len(items), chunksize):
                part = items[start : start + chunksize]
                try:
                    if chunksize == 1:
                        spec = enc.call(fn, part[0], {}, deps, cores)
                    else:
                        spec = enc.chunk(fn, part, cores)
                        spec[4] = deps
                except EncodeError as exc:
                    fut = ShoalFuture(enc.next_tid(), self)
                    fut.set_exception(exc)
                    futs.append(fut)
                    continue
                fut = ShoalFuture(spec[0], self)
                if place is not None:
                    spec.append(place)
                if failed is not None:
                    fut.set_exception(failed)
                else:
                    self._futures[spec[0]] = fut
                    out.append(spec)
                futs.append(fut)
            wake = self._io_sleeping
            self._io_sleeping = False
        if wake:
            os.eventfd_write(self._efd, 1)
        return _results(futs, deadline, chunksize > 1)

    # ---- owner hooks used by ShoalFuture ----------------------------------------------------
    def _cancel(self, futs: list[ShoalFuture]) -> bool:
        tids = {f.tid for f in futs}
        with self._lock:
            kept = [s for s in self._pending if s[0] not in tids]
            kept_static = [s for s in self._pending_static if s[0] not in tids]
            local = (len(self._pending) - len(kept)) + (len(self._pending_static) - len(kept_static))
            self._pending, self._pending_static = kept, kept_static
        if local == len(tids):
            for t in tids:
                self._futures.pop(t, None)
            return True
        try:
            done = set(self._request([P.CANCEL, None, sorted(tids)], 10.0)[0])
        except ExecutorError:
            return False
        for t in done:
            self._futures.pop(t, None)
        if len(futs) > 1:  # bulk (shutdown): mark what the head dropped
            return bool(done)
        return futs[0].tid in done

    def _request(self, msg: list[Any], timeout: float) -> list[Any]:
        ev = threading.Event()
        box: list[Any] = []
        with self._lock:
            if self._closed:
                raise ExecutorError("executor is shut down")
            self._requests.append((msg, ev, box))
        os.eventfd_write(self._efd, 1)
        if not ev.wait(timeout):
            raise ExecutorError(f"no answer from the head within {timeout:.0f} s")
        if box and isinstance(box[0], BaseException):
            raise box[0]
        return box

    # ---- the I/O thread ---------------------------------------------------------------------
    def _io_loop(self) -> None:
        sock, codec, efd = self._sock, self._codec, self._efd
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(efd, zmq.POLLIN)
        sock.send_multipart(codec.encode([P.HELLO, "client", {"pid": os.getpid(),
                                                               "host": socket.gethostname()}]))
        last_heard = last_beat = time.monotonic()
        futures = self._futures
        try:
            while True:
                with self._lock:
                    batch, self._pending = self._pending, []
                    sbatch, self._pending_static = self._pending_static, []
                    reqs, self._requests = self._requests, []
                    funcs = self._encoder.take_funcs() if (batch or sbatch) else None
                    idle = not (batch or sbatch or reqs)
                    if idle:
                        self._io_sleeping = True
                    closing = self._closed
                if batch:
                    sock.send_multipart(codec.encode([P.SUBMIT, batch, funcs, 0]), copy=False)
                    funcs = None
                if sbatch:
                    sock.send_multipart(codec.encode([P.SUBMIT, sbatch, funcs or {}, 1]), copy=False)
                for msg, ev, box in reqs:
                    rid = next(self._req_ids)
                    self._waiting_replies[rid] = (ev, box)
                    sock.send_multipart(codec.encode([msg[0], rid, *msg[2:]]))
                if closing:
                    return
                events = dict(poller.poll(500 if idle else 0))
                if idle and time.monotonic() - last_beat >= 0.5:  # the head must hear us
                    last_beat = time.monotonic()
                    sock.send_multipart(codec.encode([P.HEARTBEAT]))
                if efd in events:
                    try:
                        os.eventfd_read(efd)
                    except BlockingIOError:
                        pass
                if sock in events:
                    last_heard = time.monotonic()
                    while True:
                        try:
                            sig, body = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        except ValueError:
                            continue
                        try:
                            msg = codec.decode(sig, body)
                        except P.AuthError:
                            continue
                        kind = msg[0]
                        if kind == P.RESULTS:
                            pop = futures.pop
                            for tid, status, payload, agent_num, *_ in msg[1]:
                                fut = pop(tid, None)
                                if fut is not None:
                                    if agent_num:
                                        fut._agent_num = agent_num
                                    deliver(fut, status, payload)
                        elif kind in (P.CANCEL, P.STATS, P.AGENTS):
                            waiter = self._waiting_replies.pop(msg[1], None)
                            if waiter is not None:
                                waiter[1].append(msg[2])
                                waiter[0].set()
                        elif kind == P.WELCOME:
                            self._encoder = Encoder(msg[1]["origin"])
                            if not self._slots:
                                self._slots = int(msg[1].get("slots") or 0)
                            self._welcome.set()
                        elif kind == P.SHUTDOWN:
                            self._fail_all(ExecutorError("the head shut down"))
                            return
                elif time.monotonic() - last_heard > HEAD_SILENCE_S:
                    self._fail_all(ExecutorError(
                        f"lost the head at {self._conn.address}: silent for {HEAD_SILENCE_S:.0f} s"))
                    return
                if self._cluster is not None and idle and not self._cluster.alive():
                    self._fail_all(ExecutorError(f"the local runtime stopped: {self._cluster.why()}"))
                    return
        except zmq.ZMQError as exc:
            if not self._closed:
                self._fail_all(ExecutorError(f"transport failed: {exc}"))
        finally:
            self._welcome.set()

    def _fail_all(self, exc: BaseException) -> None:
        with self._lock:
            self._error = exc
            futs = list(self._futures.values())
            self._futures.clear()
            reqs = list(self._waiting_replies.values())
            self._waiting_replies.clear()
        for f in futs:
            if f._state == "PENDING":
                f.set_exception(exc)
        for ev, box in reqs:
            box.append(exc)
            ev.set()

    def _finish_later(self) -> None:
        outstanding = [f for f in list(self._futures.values()) if not f.done()]
        if outstanding:
            cf.wait(outstanding)
        self._terminate()

    def _terminate(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        os.eventfd_write(self._efd, 1)
        self._thread.join(5.0)
        try:
            msg = [P.SHUTDOWN] if self._cluster is not None else [P.BYE, "client done"]
            self._sock.send_multipart(self._codec.encode(msg), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        self._sock.close(linger=500)
        self._ctx.term()
        os.close(self._efd)
        if self._cluster is not None:
            self._cluster.stop()
        self._fail_all(ExecutorError("executor is shut down"))
        _live.discard(self)


class _Options:
    """Submission with dependencies and resources; see :meth:`Executor.options`."""

    def __init__(self, ex: Any, after: tuple[cf.Future, ...], cores: int,
                 place: list[Any] | None = None) -> None:
        if cores < 1:
            raise ValueError(f"cores must be >= 1, not {cores}")
        self._ex, self._after, self._cores, self._place = ex, after, cores, place

    def submit(self, fn: Callable[..., Any] | Command, /, *args: Any, **kwargs: Any) -> ShoalFuture:
        if isinstance(fn, Command) and self._cores != 1 and fn.cores == 1:
            import dataclasses

            fn = dataclasses.replace(fn, cores=self._cores)
        return self._ex._submit(fn, args, kwargs, self._after, self._cores, self._place)

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None,
            chunksize: int | None = None) -> Iterator[Any]:
        return self._ex._map(fn, iterables, timeout, chunksize, self._after, self._cores, self._place)


def _dep_ids(ex: Any, after: tuple[cf.Future, ...]) -> tuple[list[int], BaseException | None]:
    """Task ids to wait for; a dependency that already failed fails the task at once."""
    from shoal.client.future import DependencyError

    deps: list[int] = []
    for f in after:
        if not isinstance(f, ShoalFuture) or f._owner is not ex:
            raise ValueError("after= takes futures returned by this executor")
        if f.done():
            if f.cancelled() or f.exception() is not None:
                return deps, DependencyError(f"dependency task {f.tid} failed or was cancelled")
            continue
        deps.append(f.tid)
    return deps, None


def _results(futs: list[ShoalFuture], deadline: float | None, chunked: bool) -> Iterator[Any]:
    try:
        futs.reverse()  # pop from the end: results in order, finished futures freed
        while futs:
            f = futs.pop()
            left = None if deadline is None else deadline - time.monotonic()
            value = f.result(left) if left is None or left > 0 else f.result(0)
            if chunked:
                yield from value
            else:
                yield value
    finally:
        left_over = [f for f in futs if not f.done()]
        if left_over:  # the caller stopped early (error, timeout, close): drop the rest at once
            owner = left_over[0]._owner
            if owner is not None and owner._cancel(left_over):
                for f in left_over:
                    if f._state == "PENDING" and f.tid not in getattr(owner, "_futures", {}):
                        cf.Future.cancel(f)
                        f.set_running_or_notify_cancel()


@atexit.register
def _shutdown_all() -> None:
    for ex in list(_live):
        try:
            ex.shutdown(wait=False, cancel_futures=True)
            ex._terminate()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass
