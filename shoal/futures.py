"""SCOOP-compatible module API: ``from shoal import futures; futures.map(f, xs)``.

SCOOP's names (``submit``, ``map``, ``map_as_completed``, ``mapReduce``, ``mapScan``,
``wait``, ``as_completed``, ``shutdown``) and snake_case ones (``map_reduce``,
``map_scan``); shared constants are in :mod:`shoal.shared`. See docs/scoop.md.

Inside a task these submit sub-tasks from the worker (a task waiting on them yields its
worker). In a program started with ``python -m shoal prog.py`` they use the runtime the
launcher started; elsewhere the first call starts the embedded local default.

SCOOP's module attributes (``scoop.worker``, ``IS_ORIGIN``, ``IS_RUNNING``, ``SIZE``,
``DEBUG``) are ``shoal``'s too, for ``import shoal as scoop``: see :func:`scoop_attribute`.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import os
import socket
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from shoal.task import context
from shoal.task.waiting import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    FIRST_EXCEPTION,
    as_completed,
    wait,
)

__all__ = [
    "ALL_COMPLETED", "FIRST_COMPLETED", "FIRST_EXCEPTION", "as_completed", "map",
    "mapReduce", "mapScan", "map_as_completed", "map_reduce", "map_scan", "shutdown", "submit",
    "wait",
]

_default: Any = None
_default_lock = threading.Lock()


def set_executor(ex: Any) -> None:
    """Make ``ex`` the executor these functions use in this process (the launcher does)."""
    global _default
    _default = ex


def _executor() -> Any:
    wc = context.current()
    if wc is not None:
        return wc
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                from shoal.client.executor import Executor

                _default = Executor()
                atexit.register(_default.shutdown)
    return _default


def scoop_attribute(name: str) -> Any:
    """SCOOP's module attribute ``name``, as SCOOP defines it, where it is read:

    - ``worker``: this process's identity, ``b"host:pid"`` (SCOOP's is ``b"address:port"``
      of the worker's socket; both are unique per process and bytes);
    - ``IS_ORIGIN``: True in the program, False inside a task;
    - ``IS_RUNNING``: True inside a task, and in a program once it has a runtime
      (``python -m shoal`` starts one before the program runs);
    - ``SIZE``: the workers: in the program, the runtime's slots (all nodes); inside a
      task, the workers of the agent it runs on (all of them on the local default: a task
      cannot see the other nodes); AttributeError in a program with no runtime yet, as
      SCOOP defines it only when running;
    - ``DEBUG``: False (SCOOP's debug mode writes per-worker logs; shoal's record of every
      task is ``--trace``).
    """
    in_task = context.in_worker()
    if name == "worker":
        return f"{socket.gethostname()}:{os.getpid()}".encode()
    if name == "IS_ORIGIN":
        return not in_task
    if name == "IS_RUNNING":
        return in_task or _default is not None
    if name == "DEBUG":
        return False
    if name == "SIZE":
        if in_task:
            return int(os.environ.get("SHOAL_AGENT_WORKERS") or 1)
        if _default is None:
            raise AttributeError("shoal.SIZE: no runtime yet (run the program with "
                                 "`python -m shoal`, or call a shoal.futures function first)")
        # a joined head (connect=): the slots of the agents there now
        return int(getattr(_default, "_slots", 0) or sum(a.slots for a in _default.agents()))
    raise AttributeError(f"module 'shoal' has no attribute {name!r}")


def submit(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
    """Run ``fn(*args, **kwargs)`` as a task; returns a future."""
    return _executor().submit(fn, *args, **kwargs)


def _ignored(what: str, kwargs: dict[str, Any]) -> None:
    """SCOOP's map functions take and ignore any keyword (its examples pass some): so do
    these, with a warning naming them."""
    if kwargs:
        warnings.warn(f"futures.{what}: ignored keyword argument(s) {', '.join(sorted(kwargs))}"
                      " (SCOOP ignores them too)", stacklevel=3)


def map(fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None,  # noqa: A001
        chunksize: int | None = None, **ignored: Any) -> Iterator[Any]:
    """Ordered results of ``fn`` over the iterables, computed in parallel."""
    _ignored("map", ignored)
    ex = _executor()
    if chunksize is None:
        return ex.map(fn, *iterables, timeout=timeout)
    return ex.map(fn, *iterables, timeout=timeout, chunksize=chunksize)


def map_as_completed(fn: Callable[..., Any], *iterables: Iterable[Any],
                     timeout: float | None = None, **ignored: Any) -> Iterator[Any]:
    """Results of ``fn`` over the iterables in the order they finish (all submitted at
    once, at the call)."""
    _ignored("map_as_completed", ignored)
    futs = [submit(fn, *args) for args in zip(*iterables, strict=False)]

    def results() -> Iterator[Any]:
        for f in as_completed(futs, timeout):
            yield f.result()

    return results()


def mapReduce(mapFunc: Callable[..., Any], reductionOp: Callable[[Any, Any], Any],  # noqa: N802,N803
              *iterables: Iterable[Any], timeout: float | None = None, **ignored: Any) -> Any:
    """``functools.reduce(reductionOp, map(mapFunc, *iterables))``, mapped and reduced in
    parallel by a tree of tasks (SCOOP's ``mapReduce``).

    ``reductionOp`` must be associative; it need not be commutative (the order of the
    items is kept). An empty input raises ``TypeError`` as ``functools.reduce`` does.
    """
    from shoal.client.reduce import tree

    _ignored("mapReduce", ignored)
    return tree(submit, mapFunc, reductionOp, iterables, False, "mapReduce", timeout, _slots())


def mapScan(mapFunc: Callable[..., Any], reductionOp: Callable[[Any, Any], Any],  # noqa: N802,N803
            *iterables: Iterable[Any], timeout: float | None = None,
            **ignored: Any) -> list[Any]:
    """``list(itertools.accumulate(map(mapFunc, *iterables), reductionOp))``: every prefix
    reduction, in order, computed by a tree of tasks (SCOOP's ``mapScan``); ``[]`` for an
    empty input. ``reductionOp`` must be associative."""
    from shoal.client.reduce import tree

    _ignored("mapScan", ignored)
    return tree(submit, mapFunc, reductionOp, iterables, True, "mapScan", timeout, _slots())


def _slots() -> int:
    """The runtime's slots when the caller knows them (0 inside tasks): sizes the leaves."""
    return int(getattr(_executor(), "_slots", 0) or 0)


def map_reduce(fn: Callable[..., Any], reduction: Callable[[Any, Any], Any],
               *iterables: Iterable[Any], timeout: float | None = None) -> Any:
    """``functools.reduce(reduction, map(fn, *iterables))``, in parallel (see mapReduce)."""
    return mapReduce(fn, reduction, *iterables, timeout=timeout)


def map_scan(fn: Callable[..., Any], reduction: Callable[[Any, Any], Any],
             *iterables: Iterable[Any], timeout: float | None = None) -> list[Any]:
    """``list(itertools.accumulate(map(fn, *iterables), reduction))``, in parallel."""
    return mapScan(fn, reduction, *iterables, timeout=timeout)


def shutdown(wait: bool = True) -> None:  # noqa: A002 - mirrors Executor.shutdown
    """Stop the runtime these functions started (a no-op inside tasks)."""
    global _default
    ex, _default = _default, None
    if ex is not None:
        ex.shutdown(wait=wait)
