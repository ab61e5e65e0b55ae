"""Per-task failure options (retries, time limit, journal key) as they travel in a TASK.

``task_opts`` validates what a caller gives and returns the ``opts`` field of the task
tuple (see :mod:`shoal.transport.protocol`): a dict with only the keys that differ from
the head's defaults, or None, so a million plain tasks carry nothing extra.

Journal keys (what a resumed run matches finished tasks by):
  - given: ``options(key="...")``;
  - a Python call: ``"{module}.{qualname}:{sha1(pickled args)[:16]}:{n}"`` where ``n``
    counts earlier submissions of this executor with the same name and hash (so two
    identical calls are two tasks, and a rerun of the same program finds both);
  - a map chunk: the same over the chunk's pickled argument list (chunks depend on
    ``chunksize``, and by default on the slot count);
  - a Command: ``"cmd:{sha1(argv, cwd, env)[:16]}:{n}"``;
  - a task-file line (``shoal run``): ``"L{lineno}:{sha1(text)[:16]}"``.
A program that changed submits tasks under other keys: those run again; tasks whose
keys are unchanged are taken from the journal.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import msgpack


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


def with_key(opts: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """``opts`` plus a journal key (a new dict: ``opts`` is shared by many tasks)."""
    return {"key": key} if opts is None else {**opts, "key": key}


def qualified_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a function (of its type, for other callables)."""
    name = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not isinstance(name, str) or not isinstance(module, str):
        name, module = type(fn).__qualname__, type(fn).__module__
    return f"{module}.{name}"


def digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:16]


def command_digest(argv: Sequence[str], cwd: str | None, env: Any) -> str:
    """Hash of what makes a command the same command: argv, cwd and env."""
    env_items = sorted((str(k), v) for k, v in dict(env).items()) if env else []
    return digest(msgpack.packb([list(argv), cwd, env_items], use_bin_type=True))


def line_key(number: int, text: str) -> str:
    """Journal key of a task-file line: its number and a hash of its text."""
    return f"L{number}:{digest(text.encode())}"


class KeyCounter:
    """Numbers identical submissions, so each gets its own key: ``base:0``, ``base:1``..."""

    __slots__ = ("_counts", "_names")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._names: dict[int, tuple[Any, str]] = {}   # id(fn) -> (fn, "module.qualname:")

    def key(self, base: str) -> str:
        n = self._counts.get(base, 0)
        self._counts[base] = n + 1
        return f"{base}:{n}"

    def call_key(self, fn: Callable[..., Any], payload: bytes) -> str:
        """The key of a call: ``key(f"{qualified_name(fn)}:{digest(payload)}")``, with the
        name looked up once per function (this runs for every task of a journaled run)."""
        entry = self._names.get(id(fn))
        if entry is None or entry[0] is not fn:
            entry = self._names[id(fn)] = (fn, qualified_name(fn) + ":")  # holds fn: id stays
        return self.key(entry[1] + _sha1(payload).hexdigest()[:16])


_sha1 = hashlib.sha1
