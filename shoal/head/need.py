"""A task's resource request as the scheduler core sees it, and the core's task states.

Shared by the core, its records (:mod:`shoal.head.state`) and its placement rules
(:mod:`shoal.head.placement`), so none of them imports another for these words.
"""

from __future__ import annotations

import math
from typing import Any

# task states (the core's): QUEUED: ready (in a queue or an agent's own queue); BACKOFF: a
# failed attempt waits for its retry (the server calls ``requeue`` when the delay is over);
# DONE: resolved, no longer in the task table (an entry left in ``ready`` is skipped: the
# queues of plain tasks hold the tasks themselves, not tids to look up)
QUEUED, WAITING, DISPATCHED, BACKOFF, DONE = 0, 1, 2, 3, 4

RESOURCE_KEYS = ("gpus", "memory", "ranks", "nodes", "exclusive", "timeout")

# A task's stated run time (``opts["estimate"]``, seconds): not a resource (the task stays
# plain) but an order: tasks with estimates go longest first (LPT: the run's tail is the
# shortest tasks), in buckets of 1/16 of an octave (4.4%), and one estimated at
# PREFETCH_LONG_S or more is sent only to free cores (prefetched behind another long task it
# would wait where an idle core elsewhere could have run it; its round trip is < 1% of it).
EST_PER_OCTAVE = 16
EST_MIN_BUCKET = -1024         # estimates down to 2**-64 s; 0 or less: this bucket
EST_SHIFT = 48                 # a task's ``seq`` moves ahead by its bucket << EST_SHIFT
SIZE_SHIFT = 32                # and (big_first) by its size << SIZE_SHIFT: length before size
SIZE_MAX = (1 << 16) - 1       # (LPT: a long task left for last makes the tail)
PREFETCH_LONG_S = 1.0
_log2 = math.log2


def est_bucket(opts: dict[str, Any] | None) -> int | None:
    """The LPT bucket of a task's ``opts["estimate"]`` (None: no estimate, or not a number).
    On every submission with options: class checks, not isinstance (bool is an int)."""
    if not opts:
        return None
    est = opts.get("estimate")
    c = est.__class__
    if c is not float and c is not int:
        return None
    if not est > 0:  # (NaN too)
        return EST_MIN_BUCKET
    x = _log2(est if est < 1.8e19 else 1.8e19) * EST_PER_OCTAVE
    b = int(x)
    if x < b:  # floor, below 1 s
        b -= 1
    return b if b > EST_MIN_BUCKET else EST_MIN_BUCKET


LONG_BUCKET = est_bucket({"estimate": PREFETCH_LONG_S})
UNKNOWN = 1 << 30              # the core's ``_top`` while ready holds tasks without estimates


class Need:
    """One task's request; per rank for MPI tasks (``ranks`` > 0)."""

    __slots__ = ("cores", "gpus", "memory", "ranks", "nodes", "exclusive", "limit", "key", "big")

    def __init__(self, cores: int, gpus: int, memory: int, ranks: int, nodes: int,
                 exclusive: bool, limit: float | None) -> None:
        self.cores = cores
        self.gpus = gpus
        self.memory = memory
        self.ranks = ranks
        self.nodes = nodes
        self.exclusive = exclusive
        self.limit = limit
        self.key = (cores, gpus, memory, ranks, nodes, exclusive, limit)
        # large enough to deserve a reservation (a 1-core task only ever waits for credit)
        self.big = cores > 1 or gpus > 0 or memory > 0 or ranks > 0 or exclusive

    def capacity_key(self) -> tuple[Any, ...]:
        return self.key[:6]


def _int_opt(opts: dict[str, Any], key: str, low: int) -> int | str:
    v = opts.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        return f"{key!r} must be an integer >= {low}, not {v!r}"
    return v


def parse_need(cores: Any, opts: dict[str, Any] | None) -> Need | str | None:
    """The request of a task: None (plain: cores only), a :class:`Need`, or an error text."""
    if cores.__class__ is not int or cores < 1:
        return f"cores must be an integer >= 1, not {cores!r}"
    if not opts or not any(k in opts for k in RESOURCE_KEYS):
        return None
    vals = []
    for key, low in (("gpus", 0), ("memory", 0), ("ranks", 1), ("nodes", 1)):
        v = _int_opt(opts, key, low)
        if isinstance(v, str):
            return v
        vals.append(v)
    gpus, memory, ranks, nodes = vals
    if nodes and not ranks:
        return "'nodes' is for MPI tasks: give 'ranks' too"
    if nodes > ranks:
        return f"{ranks} ranks cannot spread over {nodes} nodes"
    excl = opts.get("exclusive", False)
    if not isinstance(excl, bool):
        return f"'exclusive' must be True or False, not {excl!r}"
    limit = opts.get("timeout")
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
        limit = None  # the agent enforces (or reports) the time limit; here it only gates end_time
    if not (gpus or memory or ranks or excl or limit):
        return None
    return Need(cores, gpus, memory, ranks, nodes, excl, float(limit) if limit else None)
