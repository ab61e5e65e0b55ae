"""shoal: run many tasks - Python calls and commands - fast, on every core you were given.

    from shoal import Executor
    with Executor() as ex:                 # local default: a head + one agent, a worker per core
        print(list(ex.map(pow, range(10), range(10))))

See ``shoal.futures`` for the SCOOP-style module API used by ``python -m shoal prog.py``.
Names are imported on first use, so the head and agent processes (which import
``shoal.head`` / ``shoal.agent``) do not pay for the client API at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    "ALL_COMPLETED": "concurrent.futures",
    "FIRST_COMPLETED": "concurrent.futures",
    "FIRST_EXCEPTION": "concurrent.futures",
    "Command": "shoal.client.command",
    "CommandError": "shoal.client.command",
    "CommandResult": "shoal.client.command",
    "DependencyError": "shoal.client.future",
    "Executor": "shoal.client.executor",
    "ExecutorError": "shoal.client.future",
    "AgentInfo": "shoal.client.executor",
    "HeadLost": "shoal.client.future",
    "RemoteError": "shoal.client.future",
    "RemoteTraceback": "shoal.client.future",
    "ShoalFuture": "shoal.client.future",
    "TaskError": "shoal.client.future",
    "TaskLost": "shoal.client.future",
    "TaskTimeout": "shoal.client.future",
    "as_completed": "shoal.client.waiting",
    "wait": "shoal.client.waiting",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'shoal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


if TYPE_CHECKING:  # for type checkers and IDEs
    from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION  # noqa: F401

    from shoal.client.command import Command, CommandError, CommandResult  # noqa: F401
    from shoal.client.executor import AgentInfo, Executor  # noqa: F401
    from shoal.client.future import (  # noqa: F401
        DependencyError,
        ExecutorError,
        HeadLost,
        RemoteError,
        RemoteTraceback,
        ShoalFuture,
        TaskError,
        TaskLost,
        TaskTimeout,
    )
    from shoal.client.waiting import as_completed, wait  # noqa: F401
