"""shoal: run many tasks - Python calls and commands - fast, on every core you were given.

    from shoal import Executor
    with Executor() as ex:                 # local default: a head + one agent, a worker per core
        print(list(ex.map(pow, range(10), range(10))))

See ``shoal.futures`` for the SCOOP-style module API used by ``python -m shoal prog.py``.
Names are imported on first use, so the head and agent processes (which import
``shoal.head`` / ``shoal.agent``) do not pay for the client API at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shoal._lazy import attribute as _attribute

__version__ = "0.1.0"

_WHERE = {
    "ALL_COMPLETED": "concurrent.futures",
    "FIRST_COMPLETED": "concurrent.futures",
    "FIRST_EXCEPTION": "concurrent.futures",
    "Command": "shoal.task.command",
    "CommandError": "shoal.task.command",
    "CommandResult": "shoal.task.command",
    "DependencyError": "shoal.task.errors",
    "Executor": "shoal.client.executor",
    "ExecutorError": "shoal.task.errors",
    "AgentInfo": "shoal.client.executor",
    "HeadLost": "shoal.task.errors",
    "RemoteError": "shoal.task.errors",
    "RemoteTraceback": "shoal.task.errors",
    "ShoalFuture": "shoal.task.future",
    "TaskError": "shoal.task.errors",
    "TaskLost": "shoal.task.errors",
    "TaskTimeout": "shoal.task.errors",
    "as_completed": "shoal.task.waiting",
    "wait": "shoal.task.waiting",
}

__all__ = sorted(_WHERE)

# SCOOP's module attributes, for programs ported with `import shoal as scoop`: they depend
# on where they are read (the program or a task), so they are computed at each read
# (shoal.futures.scoop_attribute), never cached here
SCOOP_ATTRIBUTES = ("DEBUG", "IS_ORIGIN", "IS_RUNNING", "SIZE", "worker")


def __getattr__(name: str) -> Any:
    if name in SCOOP_ATTRIBUTES:
        from shoal.futures import scoop_attribute

        return scoop_attribute(name)
    return _attribute("shoal", name, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


if TYPE_CHECKING:  # for type checkers and IDEs
    from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION  # noqa: F401

    from shoal.client.executor import AgentInfo, Executor  # noqa: F401
    from shoal.task.command import Command, CommandError, CommandResult  # noqa: F401
    from shoal.task.errors import (  # noqa: F401
        DependencyError,
        ExecutorError,
        HeadLost,
        RemoteError,
        RemoteTraceback,
        TaskError,
        TaskLost,
        TaskTimeout,
    )
    from shoal.task.future import ShoalFuture  # noqa: F401
    from shoal.task.waiting import as_completed, wait  # noqa: F401
