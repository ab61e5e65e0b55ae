"""shoal's Future: a real ``concurrent.futures.Future`` that knows its task and owner.

The owner (an Executor in a client process, or the worker context inside a task) gets
hooks: ``_cancel(futs, queued_only)`` (True when the head or the owner dropped or stopped
the task), ``_started(futs)`` (for :meth:`ShoalFuture.running`: asked only when called;
an owner without it says False), and ``_block(futs, timeout, return_when)`` so that a
task waiting on its sub-tasks yields its worker instead of blocking it.

States are the stdlib's: PENDING -> RUNNING (once known to have started: a failed
``cancel()`` or ``running()`` learnt it; nothing is sent per task to say so) -> FINISHED,
or PENDING -> CANCELLED_AND_NOTIFIED.

A client holds one future per pending task, up to millions of them, so a ShoalFuture is
light: ``__slots__``, no Condition, lock or lists of its own. All futures of one owner
share one Condition (``owner._fcond``); a wake-up on it may be for another future, so
every wait loops on the state. ``concurrent.futures.wait``/``as_completed`` work on them
unchanged: they take each future's ``_condition`` (the shared one is an RLock, taken
again by the same thread) and append to ``_waiters``, which is made on first use.
"""

from __future__ import annotations

import concurrent.futures as cf
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from shoal.task.errors import RemoteError, add_attempts_note, decode_error
from shoal.transport import protocol as P

_PENDING = "PENDING"
_RUNNING = "RUNNING"
_CANCELLED = "CANCELLED"
_NOTIFIED = "CANCELLED_AND_NOTIFIED"
_FINISHED = "FINISHED"
_DONE = frozenset((_CANCELLED, _NOTIFIED, _FINISHED))
_OPEN = frozenset((_PENDING, _RUNNING))  # not resolved yet
_LOG = cf._base.LOGGER


_shared: threading.Condition | None = None
_shared_lock = threading.Lock()


def _fallback_condition() -> threading.Condition:
    """The Condition of futures whose owner has none of its own (made on first use)."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = threading.Condition(threading.RLock())
    return _shared


class ShoalFuture(cf.Future):
    """A Future for a task; ``tid`` identifies the task for the whole run."""

    __slots__ = ("tid", "_owner", "_condition", "_state", "_result", "_exception",
                 "_w", "_cbs", "_agent_num")

    def __init__(self, tid: int, owner: Any) -> None:
        # no super().__init__(): it would make a Condition and two lists per future
        self.tid = tid
        self._owner = owner
        self._condition = getattr(owner, "_fcond", None) or _fallback_condition()
        self._state = _PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._w: Any = None                  # concurrent.futures waiters: see _Waiters
        self._cbs: list[Callable[[cf.Future], object]] | None = None
        self._agent_num = 0                  # from the result: the agent that ran it

    # concurrent.futures.wait/as_completed reach for the waiters list directly
    @property
    def _waiters(self) -> _Waiters:
        return _Waiters(self)

    @property
    def _done_callbacks(self) -> list[Callable[[cf.Future], object]]:
        cbs = self._cbs
        if cbs is None:
            cbs = self._cbs = []
        return cbs

    @property
    def agent(self) -> str | None:
        """Name of the agent that ran the task, once it finished (None before, or when
        it did not run on an agent: cancelled, failed dependency, impossible request)."""
        if not self._agent_num:
            return None
        lookup = getattr(self._owner, "_agent_name", None)
        return lookup(self._agent_num) if lookup is not None else None

    # ---- reading: lock-free (one attribute read is atomic) ---------------------------
    def done(self) -> bool:
        """True once the task finished, failed or was cancelled."""
        return self._state in _DONE

    def cancelled(self) -> bool:
        """True if the task was cancelled."""
        return self._state in (_CANCELLED, _NOTIFIED)

    def running(self) -> bool:
        """True while the task runs (it started and is not done); such a task can no
        longer be cancelled. Until the future knows it started, this asks where the task
        is (a round trip to the head, and its agent); then it is remembered."""
        state = self._state
        if state != _PENDING:
            return state == _RUNNING
        ask = getattr(self._owner, "_started", None)
        if ask is None or not ask([self]):
            return False
        self._mark_running()
        return self._state == _RUNNING

    def _mark_running(self) -> None:
        """The owner learnt that the task started (no-op once resolved)."""
        with self._condition:
            if self._state == _PENDING:
                self._state = _RUNNING

    def _wait(self, timeout: float | None) -> None:
        """Block until done or ``timeout`` passed; other futures' wake-ups are skipped."""
        if self._state in _DONE:
            return
        block = getattr(self._owner, "_block", None)
        if block is not None:  # inside a task: park it, its worker goes on
            block([self], timeout, cf.FIRST_COMPLETED)
            return  # done, or timed out: nothing else could resolve it while we slept
        cond = self._condition
        with cond:
            if timeout is None:
                while self._state not in _DONE:
                    cond.wait()
            else:
                end = time.monotonic() + timeout
                while self._state not in _DONE:
                    left = end - time.monotonic()
                    if left <= 0:
                        return
                    cond.wait(left)

    def result(self, timeout: float | None = None) -> Any:
        """The task's value; raises its exception, ``CancelledError``, or ``TimeoutError``
        when it is not done after ``timeout`` seconds (None: wait as long as it takes)."""
        self._wait(timeout)
        state = self._state
        if state == _FINISHED:
            exc = self._exception
            if exc is None:
                return self._result
            try:
                raise exc
            finally:
                exc = None  # no frame -> exception -> frame cycle
        if state in _OPEN:
            raise TimeoutError()
        raise cf.CancelledError()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The task's exception (None if it succeeded); waits as :meth:`result` does."""
        self._wait(timeout)
        state = self._state
        if state == _FINISHED:
            return self._exception
        if state in _OPEN:
            raise TimeoutError()
        raise cf.CancelledError()

    def add_done_callback(self, fn: Callable[[cf.Future], object]) -> None:
        """Call ``fn(future)`` when the task is done (now, if it is; in a client, later
        calls run on the executor's I/O thread: keep them short)."""
        with self._condition:
            if self._state not in _DONE:
                self._done_callbacks.append(fn)
                return
        try:
            fn(self)
        except Exception:
            _LOG.exception("exception calling callback for %r", self)

    def _invoke_callbacks(self) -> None:
        cbs, self._cbs = self._cbs, None
        for callback in cbs or ():
            try:
                callback(self)
            except BaseException:  # noqa: BLE001 - also SystemExit: the I/O thread must go on
                _LOG.exception("exception calling callback for %r", self)

    # ---- resolving ----------------------------------------------------------------------
    def _settle(self, result: Any, exc: BaseException | None, cancelled: bool = False,
                notify: bool = True) -> bool:
        """Resolve once (False if already resolved). ``notify=False``: the caller resolves
        a batch and wakes the waiters once, with :func:`wake`."""
        cond = self._condition
        with cond:
            if self._state not in _OPEN:
                return False
            w = self._w
            waiters = () if w is None else w if type(w) is list else (w,)
            if cancelled:
                self._state = _NOTIFIED
                for waiter in waiters:
                    waiter.add_cancelled(self)
            else:
                self._result = result
                self._exception = exc
                self._state = _FINISHED
                for waiter in waiters:
                    if exc is None:
                        waiter.add_result(self)
                    else:
                        waiter.add_exception(self)
            if notify and cond._waiters:  # type: ignore[attr-defined]
                cond.notify_all()
        if self._cbs:
            self._invoke_callbacks()
        return True

    def set_result(self, result: Any) -> None:
        """Resolve with a value (for owners and tests)."""
        if not self._settle(result, None):
            raise cf.InvalidStateError(f"{self._state}: {self!r}")

    def set_exception(self, exception: BaseException | None) -> None:
        """Resolve with an exception (for owners and tests)."""
        if not self._settle(None, exception):
            raise cf.InvalidStateError(f"{self._state}: {self!r}")

    def set_running_or_notify_cancel(self) -> bool:
        """As the stdlib's (for code that drives futures itself): False if cancelled,
        else mark it running and return True; RuntimeError once it is done."""
        with self._condition:
            state = self._state
            if state in (_CANCELLED, _NOTIFIED):
                self._state = _NOTIFIED
                return False
            if state == _PENDING:
                self._state = _RUNNING
                return True
        _LOG.critical("Future %s in unexpected state: %s", id(self), state)
        raise RuntimeError("Future in unexpected state")

    def cancel(self, *, running: bool = False) -> bool:
        """Cancel the task if it has not started: True then (it never runs), and it is
        done. False if it runs or finished, as in ``concurrent.futures``: then it runs
        to its end. The answer is exact: the owner asks the head, which asks the agent
        holding the task (a round trip when the task has left this process).

        ``running=True`` (shoal's own): stop it also where it runs (a command's process
        group or the worker running the Python task is killed, and replaced); True
        once stopped.
        """
        state = self._state
        if state in (_CANCELLED, _NOTIFIED):
            return True
        if state == _FINISHED or (state == _RUNNING and not running):
            return False
        owner = self._owner
        if owner is not None and not owner._cancel([self], queued_only=not running):
            return False  # (no owner: a future made by hand, cancelled here)
        return self._settle(None, None, cancelled=True) or self.cancelled()

    def __repr__(self) -> str:
        return f"<ShoalFuture task={self.tid:#x} state={self._state.lower()}>"


class _Waiters:
    """A future's waiters list as ``concurrent.futures`` uses it (append, remove, iterate).

    ``wait``/``as_completed`` put one waiter on each future they watch: the future keeps
    a single waiter as itself in ``_w`` and only a second one makes a list, so watching a
    million futures costs no list per future. Made per access, never stored.
    """

    __slots__ = ("_f",)

    def __init__(self, fut: ShoalFuture) -> None:
        self._f = fut

    def _items(self) -> tuple[Any, ...] | list[Any]:
        w = self._f._w
        return () if w is None else w if type(w) is list else (w,)

    def append(self, waiter: Any) -> None:
        f = self._f
        w = f._w
        if w is None:
            f._w = waiter
        elif type(w) is list:
            w.append(waiter)
        else:
            f._w = [w, waiter]

    def remove(self, waiter: Any) -> None:
        f = self._f
        w = f._w
        if type(w) is list:
            w.remove(waiter)
            if len(w) == 1:
                f._w = w[0]
        elif w is waiter:
            f._w = None
        else:
            raise ValueError("waiter not in list")

    def __iter__(self) -> Any:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __bool__(self) -> bool:
        return self._f._w is not None


def wake(cond: threading.Condition) -> None:
    """Wake every thread waiting on ``cond`` (after resolving futures with notify=False)."""
    with cond:
        if cond._waiters:  # type: ignore[attr-defined]
            cond.notify_all()


def deliver(fut: ShoalFuture, status: int, payload: bytes, attempts: Sequence[str] | None = None,
            *, loads: Any = pickle.loads, notify: bool = True) -> None:
    """Resolve a future from a RESULT; never raises (a bad payload becomes its error).

    ``attempts``: the head's one line per failed attempt; on a failure they become a
    note of the exception. ``notify=False``: see :meth:`ShoalFuture._settle`.
    """
    if fut._state not in _OPEN:
        return
    if status == P.OK:
        try:
            value = loads(payload)
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: this future only fails
            err = RemoteError(f"result of task cannot be loaded here: {exc!r}")
            err.__cause__ = exc
            fut._settle(None, err, notify=notify)
            return
        fut._settle(value, None, notify=notify)
    elif status == P.CANCELLED:
        fut._settle(None, None, cancelled=True, notify=notify)
    else:
        exc = decode_error(status, payload)
        if attempts:
            add_attempts_note(exc, attempts)
        fut._settle(None, exc, notify=notify)
