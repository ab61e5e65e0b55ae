"""The client's link to the head: one I/O thread per executor.

It sends what the API threads queued (submissions in batches, one message per turn;
requests such as CANCEL, STATS, AGENTS), delivers results to futures (one wake-up per
message), keeps the heartbeat both ways, and fails every pending future with one error
when the head or the runtime the executor started is lost.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: the client starts its runtime before it loads them
    from collections.abc import Callable

    import zmq

    from shoal.task.codec import Encoder
    from shoal.task.errors import InitializerError
    from shoal.task.future import ShoalFuture
    from shoal.transport.connfile import Connection
    from shoal.transport.session import PeerSession

HEARTBEAT_S = 1.0   # until WELCOME says otherwise (see protocol: Liveness)
TIMEOUT_S = 8.0


class HeadLink:
    """Mixin of :class:`shoal.client.executor.Executor`: its I/O thread and requests.

    What it uses of the executor is declared here (set by the executor's ``__init__``).
    """

    _lock: threading.Lock
    _fcond: threading.Condition
    _futures: dict[int, ShoalFuture]
    _pending: list[list[Any]]
    _pending_static: list[list[Any]]
    _requests: list[tuple[list[Any], threading.Event, list[Any]]]
    _waiting_replies: dict[int, tuple[threading.Event, list[Any]]]
    _req_ids: itertools.count[int]
    _error: BaseException | None
    _closed: bool
    _broken: str | bool
    _io_sleeping: bool
    _efd: int
    _sock: zmq.Socket
    _codec: PeerSession
    _conn: Connection
    _cluster: Any
    _encoder: Encoder | None
    _wrap: Callable[[Callable[..., Any]], Any] | None
    _slots: int
    _heartbeat_s: float
    _timeout_s: float
    _journal: bool
    _welcome: threading.Event
    _client_num: int | None

    def _request(self, msg: list[Any], timeout: float) -> list[Any]:
        from shoal.task.errors import ExecutorError

        ev = threading.Event()
        box: list[Any] = []
        with self._lock:
            if self._error is not None:
                raise self._error
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
        import zmq

        from shoal.task import errors
        from shoal.task.codec import Encoder
        from shoal.task.errors import ExecutorError
        from shoal.task.future import deliver, wake
        from shoal.transport import protocol as P

        sock, codec, efd = self._sock, self._codec, self._efd
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(efd, zmq.POLLIN)
        watch = self._cluster.watch_fds() if self._cluster is not None else {}
        for fd in watch:
            poller.register(fd, zmq.POLLIN)
        send = sock.send_multipart
        # host: a head on the same host watches this pid (killed -> lost at once, not after
        # its heartbeat timeout), as it does for clients on its ipc endpoint
        send(codec.encode([P.HELLO, "client", {"pid": os.getpid(), "host": socket.gethostname()}]))
        now = time.monotonic()
        last_heard = last_sent = now
        beat, silence = self._heartbeat_s, self._timeout_s
        next_check = now + beat
        welcomed = False
        futures = self._futures
        fcond = self._fcond
        try:
            while True:
                with self._lock:
                    batch, self._pending = self._pending, []
                    sbatch, self._pending_static = self._pending_static, []
                    reqs, self._requests = self._requests, []
                    funcs, names = (self._encoder.take_funcs_and_names() if (batch or sbatch)
                                    else (None, None))
                    idle = not (batch or sbatch or reqs)
                    if idle:
                        self._io_sleeping = True
                    closing = self._closed
                if not idle:
                    if batch:
                        send(codec.encode([P.SUBMIT, batch, funcs, 0, names]), copy=False)
                        funcs = names = None
                    if sbatch:
                        send(codec.encode([P.SUBMIT, sbatch, funcs or {}, 1, names or {}]),
                             copy=False)
                    for msg, ev, box in reqs:
                        rid = next(self._req_ids)
                        self._waiting_replies[rid] = (ev, box)
                        send(codec.encode([msg[0], rid, *msg[2:]]))
                    last_sent = time.monotonic()
                    del batch, sbatch  # the specs are sent: free them now, not next round
                if closing:
                    return
                wait_ms = max(0, int((next_check - time.monotonic()) * 1000) + 1) if idle else 0
                events = dict(poller.poll(wait_ms))
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
                            broken = None
                            for r in msg[1]:
                                fut = pop(r[0], None)
                                if fut is not None:
                                    if r[3]:
                                        fut._agent_num = r[3]
                                    deliver(fut, r[1], r[2], r[4] if len(r) > 4 else None,
                                            notify=False)
                                    if r[1] != P.OK and isinstance(fut._exception,
                                                                   errors.InitializerError):
                                        broken = fut._exception
                            wake(fcond)  # once per message, not per future
                            fut = r = None  # this thread must not keep a result alive
                            if broken is not None:
                                self._break(broken)
                        elif kind in (P.CANCEL, P.STATS, P.AGENTS, P.STATE):
                            waiter = self._waiting_replies.pop(msg[1], None)
                            if waiter is not None:
                                waiter[1].append(msg[2])
                                waiter[0].set()
                        elif kind == P.WELCOME:
                            info = msg[1]
                            self._encoder = Encoder(info["origin"], self._wrap)
                            self._client_num = info.get("num")  # shoal.shared's namespace
                            if not self._slots:
                                self._slots = int(info.get("slots") or 0)
                            beat = self._heartbeat_s = float(info.get("heartbeat_s") or HEARTBEAT_S)
                            silence = self._timeout_s = float(info.get("timeout_s") or TIMEOUT_S)
                            next_check = min(next_check, time.monotonic() + beat)
                            if info.get("journal"):
                                self._journal = True
                            welcomed = True
                            self._welcome.set()
                        elif kind == P.SHUTDOWN:
                            self._fail_all(errors.HeadLost(f"lost the head at {self._conn.address}: it shut down"))
                            return
                now = time.monotonic()
                if watch and any(fd in events for fd in watch) or now >= next_check:
                    next_check = now + min(beat, 0.5)
                    why = self._cluster.dead() if self._cluster is not None else None
                    if why is not None:
                        self._fail_all(why)
                        self._cluster.abort()
                        return
                    if welcomed and now - last_heard > silence:
                        self._fail_all(errors.HeadLost(f"lost the head at {self._conn.address}: "
                                                f"silent for {now - last_heard:.0f} s"))
                        if self._cluster is not None:  # ours, and of no more use
                            self._cluster.abort()
                        return
                    if now - last_sent >= beat:
                        send(codec.encode([P.HEARTBEAT]))
                        last_sent = now
        except zmq.ZMQError as exc:
            if not self._closed:
                self._fail_all(ExecutorError(f"transport failed: {exc}"))
        except BaseException as exc:  # noqa: BLE001 - no future may wait for a dead thread
            self._fail_all(ExecutorError(f"the client's I/O thread failed: {exc!r}"))
            raise
        finally:
            self._welcome.set()

    def _break(self, exc: InitializerError) -> None:
        """A worker's initializer failed: as ProcessPoolExecutor, fail what is pending and
        refuse new tasks; the head drops this executor's queued tasks (I/O thread)."""
        from shoal.task.errors import InitializerError
        from shoal.task.future import _LOG
        from shoal.transport import protocol as P

        cause = exc.__cause__
        _LOG.critical("Exception in initializer:\n%s", cause if cause is not None else exc)
        with self._lock:
            self._pending, self._pending_static = [], []
            tids = sorted(self._futures)
        self._broken = ("A worker initializer failed, the executor is not usable anymore: "
                        f"{str(exc).rpartition(': ')[2] or exc}")
        self._fail_all(InitializerError(self._broken))
        if tids:
            with self._lock:
                self._requests.append(([P.CANCEL, None, tids], threading.Event(), []))

    def _fail_all(self, exc: BaseException) -> None:
        from shoal.task.future import wake

        with self._lock:
            if self._error is None:
                self._error = exc
            futs = list(self._futures.values())
            self._futures.clear()
            reqs = list(self._waiting_replies.values())
            self._waiting_replies.clear()
        for f in futs:
            f._settle(None, exc, notify=False)
        wake(self._fcond)
        for ev, box in reqs:
            box.append(exc)
            ev.set()
