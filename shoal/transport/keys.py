"""Journal keys: what a resumed run matches finished tasks by (docs/journal.md).

The rule is part of the protocol, shared by both sides: a client may give a key
(``options(key=...)``, ``shoal run``'s line keys); the head derives the default key of
every other task a client submits while the journal is on, so a journaled run costs the
client nothing per task. Keys:

  - given: ``options(key="...")``;
  - a Python call: ``"{module}.{qualname}:{sha1(pickled args)[:16]}:{n}"`` where ``n``
    counts earlier submissions of the same client with the same name and hash (two
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
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from shoal.transport import protocol as P

_sha1 = hashlib.sha1


def digest(data: bytes) -> str:
    return _sha1(data).hexdigest()[:16]


def qualified_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a function (of its type, for other callables)."""
    name = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not isinstance(name, str) or not isinstance(module, str):
        name, module = type(fn).__qualname__, type(fn).__module__
    return f"{module}.{name}"


def command_digest(argv: Sequence[str], cwd: str | None, env: Any) -> str:
    """Hash of what makes a command the same command: argv, cwd and env."""
    env_items = sorted((str(k), v) for k, v in dict(env).items()) if env else []
    return digest(msgpack.packb([list(argv), cwd, env_items], use_bin_type=True))


def line_key(number: int, text: str) -> str:
    """Journal key of a task-file line: its number and a hash of its text."""
    return f"L{number}:{digest(text.encode())}"


def given_key(spec: list[Any]) -> str | None:
    """The key a task's submitter gave (``opts["key"]``), or None; a malformed one is None."""
    opts = spec[P.T_OPTS] if len(spec) > P.T_OPTS else None
    key = opts.get("key") if isinstance(opts, dict) else None
    return key if isinstance(key, str) and key else None


class KeyCounter:
    """The keys of one submitter's tasks: each task's base (name and hash) numbered by how
    many tasks with that base came before (``base:0``, ``base:1``...)."""

    __slots__ = ("_counts", "names")

    def __init__(self, names: dict[int, str]) -> None:
        self._counts: dict[str, int] = {}
        self.names: dict[int, str] = {}  # function id -> "module.qualname:"
        self.add_names(names)

    def add_names(self, names: dict[int, str]) -> None:
        """Names of a submitter's functions, as it sends them (once each)."""
        for fid, name in names.items():
            if isinstance(name, str):
                self.names[fid] = name + ":"

    def keys(self, specs: list[list[Any]]) -> list[str | None]:
        """The journal keys of ``specs``, in order (see :meth:`key`). One loop for a whole
        SUBMIT: this runs for every task of a journaled run, in the head."""
        names, counts, sha1, cmd = self.names, self._counts, _sha1, P.CMD
        out: list[str | None] = []
        for spec in specs:
            if len(spec) > 8 and spec[8] or spec[1] == cmd:  # P.T_OPTS, P.T_KIND
                out.append(self.key(spec))
                continue
            name = names.get(spec[2])  # P.T_FID
            payload = spec[3]  # P.T_PAYLOAD
            if name is None or type(payload) is not bytes:
                out.append(None)
                continue
            base = name + sha1(payload).hexdigest()[:16]
            n = counts.get(base, 0)
            counts[base] = n + 1
            out.append(f"{base}:{n}")
        return out

    def key(self, spec: list[Any]) -> str | None:
        """The journal key of ``spec``: the given one, else the default rule's; None for
        a task the rule cannot name (a function whose name was never sent, a malformed
        command), which then runs without the journal."""
        if len(spec) > P.T_OPTS and spec[P.T_OPTS]:  # most tasks carry no opts at all
            given = given_key(spec)
            if given is not None:
                return given
        kind, payload = spec[1], spec[3]  # P.T_KIND, P.T_PAYLOAD
        if kind == P.CMD:
            if not isinstance(payload, dict) or not isinstance(payload.get("argv"), list):
                return None
            try:
                base = "cmd:" + command_digest(payload["argv"], payload.get("cwd"), payload.get("env"))
            except (TypeError, ValueError):
                return None
        else:
            name = self.names.get(spec[2])  # P.T_FID
            if name is None or type(payload) is not bytes:
                return None
            base = name + _sha1(payload).hexdigest()[:16]
        counts = self._counts
        n = counts.get(base, 0)
        counts[base] = n + 1
        return f"{base}:{n}"
