"""shoal's Future: a real ``concurrent.futures.Future`` that knows its task and owner.

The owner (an Executor in a client process, or the worker context inside a task) gets
two hooks: ``_cancel(fut)`` for an exact cancel (only tasks not yet handed to an agent
can be cancelled), and ``_block(fut, timeout)`` so that a task waiting on its sub-tasks
yields its worker instead of blocking it.
"""

from __future__ import annotations

import concurrent.futures as cf
import pickle
from typing import Any

from shoal.transport import protocol as P


class RemoteTraceback(Exception):
    """Carries the traceback text of an exception raised in a task on another process."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class RemoteError(Exception):
    """A task raised an exception that could not itself be sent back (unpicklable)."""


class TaskLost(Exception):
    """The worker or agent running the task died before the task finished."""


class DependencyError(Exception):
    """A task was not run because a task it depends on failed or was cancelled."""


class TaskError(Exception):
    """The runtime could not run the task (e.g. it asks for more cores than any node has)."""


class ShoalFuture(cf.Future):
    """A Future for a task; ``tid`` identifies the task for the whole run."""

    _agent_num = 0  # set from the result: the number of the agent that ran the task

    def __init__(self, tid: int, owner: Any) -> None:
        super().__init__()
        self.tid = tid
        self._owner = owner

    @property
    def agent(self) -> str | None:
        """Name of the agent that ran the task, once it finished (None before, or when
        it did not run on an agent: cancelled, failed dependency, impossible request)."""
        if not self._agent_num:
            return None
        lookup = getattr(self._owner, "_agent_name", None)
        return lookup(self._agent_num) if lookup is not None else None

    def result(self, timeout: float | None = None) -> Any:
        if self._state not in ("FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED"):
            block = getattr(self._owner, "_block", None)
            if block is not None:
                block([self], timeout, cf.FIRST_COMPLETED)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state not in ("FINISHED", "CANCELLED", "CANCELLED_AND_NOTIFIED"):
            block = getattr(self._owner, "_block", None)
            if block is not None:
                block([self], timeout, cf.FIRST_COMPLETED)
        return super().exception(timeout)

    def cancel(self) -> bool:
        with self._condition:
            if self._state in ("CANCELLED", "CANCELLED_AND_NOTIFIED"):
                return True
            if self._state != "PENDING":
                return False
        owner = self._owner
        if owner is None or not owner._cancel([self]):
            return False
        if super().cancel():
            self.set_running_or_notify_cancel()
        return True

    def __repr__(self) -> str:
        return f"<ShoalFuture task={self.tid:#x} state={self._state.lower()}>"


def exception_payload(exc: BaseException, tb_text: str) -> bytes:
    """Pickle an exception with its traceback text; fall back to a RemoteError."""
    try:
        return pickle.dumps((exc, tb_text), protocol=5)
    except Exception:  # noqa: BLE001 - any pickling failure means: send text instead
        try:
            import cloudpickle

            return cloudpickle.dumps((exc, tb_text))
        except Exception:  # noqa: BLE001
            return pickle.dumps((RemoteError(f"{type(exc).__name__}: {exc}"), tb_text))


def decode_error(status: int, payload: bytes, what: str = "task") -> BaseException:
    """Turn an error result into the exception the caller sees."""
    if status == P.ERR and payload[:1] == b"\x80":  # a pickle (protocol >= 2)
        try:
            exc, tb_text = pickle.loads(payload)
        except Exception as load_exc:  # noqa: BLE001 - e.g. exception class not importable here
            return RemoteError(f"{what} raised an exception that cannot be loaded here: {load_exc}")
        if tb_text:
            exc.__cause__ = RemoteTraceback(tb_text)
            if hasattr(exc, "add_note"):
                exc.add_note(f"\nRemote traceback:\n{tb_text.rstrip()}")
        return exc
    text = payload.decode(errors="replace") if isinstance(payload, bytes) else str(payload)
    if status == P.DEPFAIL:
        return DependencyError(text)
    if status == P.LOST:
        return TaskLost(text)
    if status == P.CANCELLED:
        return cf.CancelledError(text)
    return TaskError(text)


def deliver(fut: ShoalFuture, status: int, payload: bytes, loads: Any = pickle.loads) -> None:
    """Resolve a future from a RESULT; never raises (a bad payload becomes its error)."""
    if fut._state != "PENDING":
        return
    if status == P.OK:
        try:
            value = loads(payload)
        except Exception as exc:  # noqa: BLE001
            fut.set_exception(RemoteError(f"result of task cannot be loaded here: {exc!r}"))
            return
        fut.set_result(value)
    elif status == P.CANCELLED:
        super(ShoalFuture, fut).cancel()
        fut.set_running_or_notify_cancel()
    else:
        fut.set_exception(decode_error(status, payload))
