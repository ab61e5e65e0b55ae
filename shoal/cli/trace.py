"""`shoal trace FILE`: the report of a task trace (shoal.trace.report)."""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any) -> None:
    from shoal.trace.report import add_arguments, run

    p = sub.add_parser("trace", help="report on a trace file (makespan, utilization, setup time)")
    add_arguments(p)
    p.set_defaults(func=run)
