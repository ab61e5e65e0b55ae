"""Per-task options (retries, time limit, journal key, resources) as they travel in a TASK.

``task_opts`` validates what a caller gives and returns the ``opts`` field of the task
tuple (see :mod:`shoal.transport.protocol`): a dict with only the keys that differ from
the head's defaults, or None, so a million plain tasks carry nothing extra.
``resource_opts`` does the same for resource requests other than cores (GPUs, memory,
MPI ranks and nodes, exclusive use; docs/resources.md); cores travel in the task's own
``cores`` field.

Journal keys: the rule lives in :mod:`shoal.transport.keys` (the head derives them).
"""

from __future__ import annotations

import math
from typing import Any

from shoal.agent.limits import parse_size


def retries_value(value: Any, what: str = "retries") -> int:
    """``value`` as a number of retries (an int >= 0), or a clear ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be an int >= 0, not {value!r}")
    return value


def timeout_value(value: Any, what: str = "timeout") -> float:
    """``value`` as a time limit in seconds (a finite number > 0), or a clear ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            value > 0 and math.isfinite(value)):
        raise ValueError(f"{what} must be a number of seconds > 0, not {value!r}")
    return float(value)


def class_names(retry_on: Any) -> list[str]:
    """Exception classes as the ``"module.QualName"`` strings the head matches on."""
    classes = retry_on if isinstance(retry_on, (tuple, list, set, frozenset)) else (retry_on,)
    names = []
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise ValueError(f"retry_on takes exception classes, not {cls!r}")
        names.append(f"{cls.__module__}.{cls.__qualname__}")
    if not names:
        raise ValueError("retry_on is empty: give exception classes, or leave it out")
    return names


def task_opts(retries: int | None, retry_on: Any, timeout: float | None,
              key: str | None = None) -> dict[str, Any] | None:
    """The TASK ``opts`` field: only what differs from the defaults (None: nothing)."""
    opts: dict[str, Any] = {}
    if retries is not None and retries_value(retries):
        opts["retries"] = retries
    if retry_on is not None:
        opts["retry_on"] = class_names(retry_on)
    if timeout is not None:
        opts["timeout"] = timeout_value(timeout)
    if key is not None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty str, not {key!r}")
        opts["key"] = key
    return opts or None


_DURATION = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def estimate_value(value: Any, what: str = "estimate") -> float:
    """``value`` as a stated run time in seconds: a number > 0, or a string such as
    ``"90"``, ``"90s"``, ``"5m"``, ``"2h"``; else a clear ValueError."""
    if isinstance(value, str):
        num = value.strip().rstrip("smhin")
        unit = value.strip()[len(num):]
        try:
            if unit not in _DURATION:
                raise ValueError
            value = float(num) * _DURATION[unit]
        except ValueError:
            raise ValueError(f"{what} must be seconds (90, 90s, 5m, 2h), not {value!r}") from None
    return timeout_value(value, what)


# Resource requests (the RESOURCE CONTRACT of issue 11): names as they travel in opts.
RESOURCE_KEYS = ("cores", "gpus", "memory", "ranks", "nodes", "exclusive")

def count_value(value: Any, what: str) -> int:
    """``value`` as a count of cores, GPUs, ranks or nodes (an int >= 1), or a ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an int >= 1, not {value!r}")
    return value


def memory_value(value: Any, what: str = "memory") -> int:
    """``value`` as bytes: an int >= 1, or a string such as ``"512M"``, ``"4G"``,
    ``"1.5GiB"`` (K/M/G/T and KiB/MiB/... are powers of 1024, KB/MB/... of 1000)."""
    if isinstance(value, str):
        try:
            size = parse_size(value)  # the agents' --max-output sizes: one syntax everywhere
        except ValueError:
            size = None
        if size is None or size < 1:
            raise ValueError(f"{what} must be bytes or a size such as '512M', '4G', '1.5GiB', "
                             f"not {value!r}")
        return size
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be an int >= 1 (bytes) or a size such as '4G', "
                         f"not {value!r}")
    return value


def resource_opts(gpus: int | None = None, memory: int | str | None = None,
                  ranks: int | None = None, nodes: int | None = None,
                  exclusive: bool = False) -> dict[str, Any]:
    """The resource keys of a TASK's ``opts``, validated: only those asked for.

    ``gpus`` and ``memory`` are per task (per rank for an MPI task); ``ranks`` makes an MPI
    task; ``nodes`` (only with ``ranks``) spreads its ranks over exactly that many agents.
    """
    res: dict[str, Any] = {}
    if gpus is not None:
        res["gpus"] = count_value(gpus, "gpus")
    if memory is not None:
        res["memory"] = memory_value(memory)
    if ranks is not None:
        res["ranks"] = count_value(ranks, "ranks")
    if nodes is not None:
        nodes = count_value(nodes, "nodes")
        if ranks is None:
            raise ValueError(f"nodes={nodes} needs ranks=: nodes spread the ranks of an MPI task")
        if nodes > ranks:
            raise ValueError(f"nodes={nodes} with ranks={ranks}: every node needs at least one rank")
        res["nodes"] = nodes
    if not isinstance(exclusive, bool):
        raise ValueError(f"exclusive must be True or False, not {exclusive!r}")
    if exclusive:
        res["exclusive"] = True
    return res
