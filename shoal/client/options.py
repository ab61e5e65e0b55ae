"""Per-task failure options (retries, time limit, journal key) as they travel in a TASK.

``task_opts`` validates what a caller gives and returns the ``opts`` field of the task
tuple (see :mod:`shoal.transport.protocol`): a dict with only the keys that differ from
the head's defaults, or None, so a million plain tasks carry nothing extra.

Journal keys: the rule lives in :mod:`shoal.transport.keys` (the head derives them).
"""

from __future__ import annotations

import math
from typing import Any


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
