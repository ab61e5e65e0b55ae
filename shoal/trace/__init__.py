"""Task traces: every attempt of every task, recorded by the head (``--trace FILE``).

    from shoal import trace
    t = trace.read("run.trace")          # one head run: attempts, agents, clients
    s = trace.summary("run.trace")       # makespan, utilization, setup time, per agent

The store (what is recorded, where, the file format) is :mod:`shoal.trace.store`; the
report's definitions are in :mod:`shoal.trace.report`; `shoal trace FILE` prints it.
"""

from shoal.trace.reader import AgentSpan, Attempt, Trace, read
from shoal.trace.report import format_text, summary
from shoal.trace.store import TraceError

__all__ = ["AgentSpan", "Attempt", "Trace", "TraceError", "format_text", "read", "summary"]
