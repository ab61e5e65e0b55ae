"""shoal: run many tasks - Python calls and commands - fast, on every core you were given.

    from shoal import Executor
    with Executor() as ex:                 # local default: a head + one agent, a worker per core
        print(list(ex.map(pow, range(10), range(10))))

See ``shoal.futures`` for the SCOOP-style module API used by ``python -m shoal prog.py``.
"""

from __future__ import annotations

from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION

from shoal.client.command import Command, CommandError, CommandResult
from shoal.client.executor import Executor, ExecutorError
from shoal.client.future import (
    DependencyError,
    RemoteError,
    RemoteTraceback,
    ShoalFuture,
    TaskError,
    TaskLost,
)
from shoal.client.waiting import as_completed, wait

__version__ = "0.1.0"

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "Command",
    "CommandError",
    "CommandResult",
    "DependencyError",
    "Executor",
    "ExecutorError",
    "RemoteError",
    "RemoteTraceback",
    "ShoalFuture",
    "TaskError",
    "TaskLost",
    "as_completed",
    "wait",
]
