"""Where this code runs: in a client process, or inside a task on a shoal worker.

The worker sets its context when it starts (:func:`enter_worker`); the functions that
behave differently inside a task (``shoal.futures``, ``shoal.shared``, ``wait`` and
``as_completed``) ask :func:`current` instead of importing the worker.
"""

from __future__ import annotations

from typing import Any

_current: Any = None  # the worker's context (shoal.agent.worker.WorkerContext) in a worker


def current() -> Any:
    """The worker context when called in a worker process (inside a task), else None.

    It submits sub-tasks (``submit``/``map``, as an executor does) and parks the calling
    task while it waits on futures (``_block``), so the worker runs other tasks meanwhile.
    """
    return _current


def in_worker() -> bool:
    """True inside a shoal worker process (a task, or code it imports)."""
    return _current is not None


def enter_worker(ctx: Any) -> None:
    """Make ``ctx`` this process's worker context (the worker does, once, at start)."""
    global _current
    _current = ctx
