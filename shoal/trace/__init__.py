"""Task traces: every attempt of every task, recorded by the head (``--trace FILE``).

    from shoal import trace
    t = trace.read("run.trace")          # one head run: attempts, agents, clients
    s = trace.summary("run.trace")       # makespan, utilization, setup time, per agent

The store (what is recorded, where, the file format) is :mod:`shoal.trace.store`; the
report's definitions are in :mod:`shoal.trace.report`; `shoal trace FILE` prints it.

The names below are imported on first use: the head imports ``shoal.trace.store`` at
every start, and the reader and the report (their dataclasses, ~3 ms of a cold start's
CPU) are for reading a trace afterwards.
"""

from __future__ import annotations

from typing import Any

from shoal._lazy import attribute as _attribute

_WHERE = {
    "AgentSpan": "shoal.trace.reader",
    "Attempt": "shoal.trace.reader",
    "Trace": "shoal.trace.reader",
    "read": "shoal.trace.reader",
    "format_text": "shoal.trace.report",
    "summary": "shoal.trace.report",
    "TraceError": "shoal.trace.store",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    return _attribute("shoal.trace", name, _WHERE, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
