"""What a failed task becomes on each side: the exceptions shoal raises, how a worker packs
an exception with its traceback text, and how a caller unpacks it (client and worker alike)."""

from __future__ import annotations

import concurrent.futures as cf
import pickle
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shoal.transport import protocol as P

if TYPE_CHECKING:
    from concurrent.futures.process import BrokenProcessPool


class ExecutorError(RuntimeError):
    """The runtime behind an executor failed (the head stopped or cannot be reached)."""


class TaskTimeout(TimeoutError):
    """A task's attempt ran past its time limit (``options(timeout=)``,
    ``Executor(task_timeout=)``) and was killed."""


class RemoteTraceback(Exception):
    """Carries the traceback text of an exception raised in a task on another process."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


class RemoteError(Exception):
    """A task raised an exception that could not itself be sent back (unpicklable)."""


class DependencyError(Exception):
    """A task was not run because a task it depends on failed or was cancelled."""


class TaskError(Exception):
    """The runtime could not run the task (e.g. it asks for more cores than any node has)."""


# HeadLost, TaskLost and InitializerError are ``BrokenProcessPool``s, as ProcessPoolExecutor's
# errors are, so that code written for it catches them. Their base's module
# (concurrent.futures.process) imports most of multiprocessing, ~4 ms of every cold start
# (client and agent) that only a failure needs: they are made on first use (``__getattr__``:
# ``shoal.TaskLost``, ``from shoal.task.errors import TaskLost`` and unpickling alike).
_BROKEN = ("HeadLost", "TaskLost", "InitializerError")

if TYPE_CHECKING:
    class HeadLost(ExecutorError, BrokenProcessPool): ...
    class TaskLost(BrokenProcessPool): ...
    class InitializerError(BrokenProcessPool): ...


def _make_broken() -> None:
    from concurrent.futures.process import BrokenProcessPool

    class HeadLost(ExecutorError, BrokenProcessPool):
        """The head of the run is gone (its process exited, or it was silent past the
        heartbeat timeout): every pending future fails with it, and so does every later
        submit. A ``BrokenProcessPool`` (what ``ProcessPoolExecutor`` raises when it breaks)."""

    class TaskLost(BrokenProcessPool):
        """The worker or agent running the task died before the task finished (and the
        crash limit or the retries were used up). A ``BrokenProcessPool``, which is what
        ``ProcessPoolExecutor`` raises when a worker dies; unlike it, the executor goes on."""

    class InitializerError(BrokenProcessPool):
        """``Executor(initializer=)`` raised in a worker: as with ``ProcessPoolExecutor``, the
        executor is broken from then on (pending and later tasks fail with this error)."""

    for cls in (HeadLost, TaskLost, InitializerError):
        cls.__qualname__ = cls.__name__  # pickled by reference: shoal.task.errors.<name>
        globals().setdefault(cls.__name__, cls)


def __getattr__(name: str) -> Any:
    if name in _BROKEN:
        _make_broken()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        except BaseException as load_exc:  # noqa: BLE001 - e.g. class not importable here,
            # or SystemExit from a __setstate__: it must not stop the thread that delivers
            err = RemoteError(f"{what} raised an exception that cannot be loaded here: {load_exc!r}")
            err.__cause__ = load_exc
            return err
        if tb_text:
            exc.__cause__ = RemoteTraceback(tb_text)
            if hasattr(exc, "add_note"):
                exc.add_note(f"\nRemote traceback:\n{tb_text.rstrip()}")
        return exc
    text = payload.decode(errors="replace") if isinstance(payload, bytes) else str(payload)
    if status == P.DEPFAIL:
        return DependencyError(text)
    if status == P.LOST:
        return __getattr__("TaskLost")(text)
    if status == P.TIMEOUT:
        return TaskTimeout(text)
    if status == P.CANCELLED:
        return cf.CancelledError(text)
    return TaskError(text)


def add_attempts_note(exc: BaseException, attempts: Sequence[str]) -> None:
    """Note on ``exc`` what each failed attempt of its task did (one line each)."""
    if attempts and hasattr(exc, "add_note"):
        exc.add_note("attempts of this task:\n" + "\n".join(f"  {a}" for a in attempts))
