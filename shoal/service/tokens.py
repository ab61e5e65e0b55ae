"""Tokens of ``shoal serve``: who may submit, and how much.

The tokens file is TOML, one table per user::

    [tokens.alice]
    sha256 = "9f86d081884c7d65..."   # hex SHA-256 of the token (preferred: the file holds no secret)
    max_jobs = 2                     # queued + running jobs at once (default 4)
    max_output = "20G"               # bytes kept in this token's job directories (default 10G)
    rate = "10/s"                    # API requests: 10 a second on average (also "600/min",
                                     # "36000/h" or a number per second; default: no limit)
    burst = 20                       # ... and up to 20 at once (default: one second's worth)
    expires = 2027-01-31T00:00:00Z   # a TOML date-time (UTC unless it says) or a date (its
                                     # start, UTC); from then on the token gets 401

    [tokens.ci]
    token = "a-long-random-string"   # the token itself; then the file must not be readable by others

``shoal serve --new-token NAME`` prints a fresh token and the table to paste. A request names its
token in ``Authorization: Bearer TOKEN``; it is compared in constant time against every known
token's digest, so the answer time says nothing about which token came close.

Rates are token buckets (:class:`RateLimiter`): each token's bucket holds ``burst`` requests
and refills at ``rate``; a request that finds it empty gets 429 with ``Retry-After``. A
``[defaults]`` table gives any of ``max_jobs``, ``max_output``, ``rate`` and ``burst`` to every
token that does not set its own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import math
import os
import re
import secrets
import stat
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from shoal.agent.limits import parse_size as _parse_size

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_MAX_JOBS = 4
DEFAULT_MAX_OUTPUT = 10 << 30



class TokensError(ValueError):
    """A bad tokens file (one line naming the file and the entry)."""


def parse_size(text: str | int, what: str = "size") -> int:
    """``"20G"``, ``"512M"``, ``"1.5K"`` or a number of bytes -> bytes, in the syntax of
    every other size option (:func:`shoal.agent.limits.parse_size`); no "unlimited" here."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"{what}: negative size {text}")
        return text
    try:
        size = _parse_size(str(text))
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if size is None:
        raise ValueError(f"{what}: {text!r} is not a size (like 512M, 20G or a number of bytes)")
    return size


def format_size(n: float) -> str:
    """Bytes as ``1.0 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def digest(token: str) -> bytes:
    """The SHA-256 of a token: what is compared and stored."""
    return hashlib.sha256(token.encode()).digest()


_PER = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
        "hour": 3600.0}


def parse_rate(value: object) -> float:
    """``"10/s"``, ``"600/min"``, ``"100/h"`` or a number (per second) -> requests a second."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        per_s = float(value)
    elif isinstance(value, str) and (m := re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*/\s*([a-z]+)\s*",
                                                       value)) and m[2] in _PER:
        per_s = float(m[1]) / _PER[m[2]]
    else:
        raise ValueError(f"rate {value!r}: expected requests per time, like \"10/s\", "
                         "\"600/min\", \"100/h\", or a number per second")
    if not per_s > 0 or math.isinf(per_s):
        raise ValueError(f"rate {value!r}: must be more than 0")
    return per_s


def parse_expiry(value: object) -> float:
    """A TOML date-time (UTC when it has no offset) or date (its start, UTC), or the same
    in a string (ISO 8601) -> Unix time."""
    if isinstance(value, str):
        try:
            value = (dt.date.fromisoformat(value) if len(value) == 10
                     else dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            pass
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.timestamp()
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc).timestamp()
    raise ValueError(f"expires {value!r}: expected a date-time (2027-01-31T00:00:00Z) or a "
                     "date (2027-01-31)")


def format_time(t: float) -> str:
    """Unix time as ``2027-01-31T00:00:00Z``."""
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Token:
    """One user of the service. ``rate``: requests a second (None: no limit), ``burst``:
    requests at once; ``expires``: Unix time from which the token is refused (None: never)."""

    name: str
    sha256: bytes
    max_jobs: int = DEFAULT_MAX_JOBS
    max_output: int = DEFAULT_MAX_OUTPUT
    rate: float | None = None
    burst: int = 1
    expires: float | None = None

    def expired(self, now: float | None = None) -> bool:
        return self.expires is not None and (time.time() if now is None else now) >= self.expires


class RateLimiter:
    """A token bucket per token: :meth:`take` spends one request, or says how long to wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, at monotonic)

    def take(self, tok: Token, now: float | None = None) -> float:
        """0 when the request may go on (one is spent), else seconds until one is free."""
        if tok.rate is None:
            return 0.0
        t = time.monotonic() if now is None else now
        with self._lock:
            level, at = self._buckets.get(tok.name, (float(tok.burst), t))
            level = min(float(tok.burst), level + (t - at) * tok.rate)
            if level >= 1.0:
                self._buckets[tok.name] = (level - 1.0, t)
                return 0.0
            self._buckets[tok.name] = (level, t)
            return (1.0 - level) / tok.rate


class Tokens:
    """The known tokens; :meth:`check` finds the one a request presents."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens

    @classmethod
    def load(cls, path: str) -> Tokens:
        """Read and check a tokens file (see the module doc)."""
        try:
            with open(path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                data = tomllib.load(f)
        except OSError as exc:
            raise TokensError(f"{path}: cannot read tokens file: {exc.strerror}")
        except tomllib.TOMLDecodeError as exc:
            raise TokensError(f"{path}: not valid TOML: {exc}")
        table = data.get("tokens")
        if not isinstance(table, dict) or not table:
            raise TokensError(f"{path}: no [tokens.NAME] tables")
        unknown_top = set(data) - {"tokens", "defaults"}
        if unknown_top:
            raise TokensError(f"{path}: unknown table or key {sorted(unknown_top)[0]!r} "
                              "(tokens, defaults)")
        defaults = data.get("defaults", {})
        if not isinstance(defaults, dict):
            raise TokensError(f"{path}: [defaults] must be a table")
        bad = set(defaults) - _DEFAULTABLE
        if bad:
            raise TokensError(f"{path}: [defaults]: unknown key {sorted(bad)[0]!r} "
                              f"({', '.join(sorted(_DEFAULTABLE))})")
        out: list[Token] = []
        seen: set[bytes] = set()
        for name, entry in table.items():
            where = f"{path}: [tokens.{name}]"
            if not isinstance(entry, dict):
                raise TokensError(f"{where}: not a table")
            unknown = set(entry) - {"sha256", "token", "expires"} - _DEFAULTABLE
            if unknown:
                raise TokensError(f"{where}: unknown key {sorted(unknown)[0]!r}")
            if ("sha256" in entry) == ("token" in entry):
                raise TokensError(f"{where}: give exactly one of 'sha256' and 'token'")
            if "token" in entry:
                tok = entry["token"]
                if not isinstance(tok, str) or len(tok) < 16:
                    raise TokensError(f"{where}: 'token' must be a string of 16 characters or more")
                if mode & (stat.S_IRWXG | stat.S_IRWXO):
                    raise TokensError(f"{where}: the file holds a plain token but others may read "
                                      f"it (chmod 600 {path}, or store 'sha256' instead)")
                dig = digest(tok)
            else:
                hexd = entry["sha256"]
                if not isinstance(hexd, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", hexd):
                    raise TokensError(f"{where}: 'sha256' must be 64 hex digits")
                dig = bytes.fromhex(hexd)
            if dig in seen:
                raise TokensError(f"{where}: the same token as another entry")
            seen.add(dig)
            try:
                out.append(_token(str(name), dig, {**defaults, **entry}))
            except ValueError as exc:
                # a bad value from [defaults] is named there
                src = where if any(k in entry for k in _key_of(exc)) or not _key_of(exc) \
                    else f"{path}: [defaults]"
                raise TokensError(f"{src}: {exc}")
        return cls(out)

    def check(self, presented: str | None) -> Token | None:
        """The token whose digest equals that of ``presented``, else None. Every entry is
        compared (constant time each), whichever matches."""
        if not presented:
            return None
        d = digest(presented)
        found = None
        for t in self.tokens:
            if hmac.compare_digest(d, t.sha256):
                found = t
        return found


_DEFAULTABLE = {"max_jobs", "max_output", "rate", "burst"}


def _key_of(exc: ValueError) -> list[str]:
    """The key a value error of :func:`_token` is about (its message starts with it)."""
    word = str(exc).split(" ", 1)[0]
    return [word] if word in _DEFAULTABLE | {"expires"} else []


def _whole(entry: dict[str, Any], key: str, default: int) -> int:
    v = entry.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{key} must be a whole number >= 1, not {v!r}")
    return v


def _token(name: str, dig: bytes, entry: dict[str, Any]) -> Token:
    """One token from its table (merged over [defaults]); ValueError names the key."""
    max_jobs = _whole(entry, "max_jobs", DEFAULT_MAX_JOBS)
    max_output = parse_size(entry.get("max_output", DEFAULT_MAX_OUTPUT), "max_output")
    rate = parse_rate(entry["rate"]) if "rate" in entry else None
    if "burst" in entry and rate is None:
        raise ValueError("burst without a rate: give 'rate' too")
    burst = _whole(entry, "burst", max(1, math.ceil(rate or 1)))
    expires = parse_expiry(entry["expires"]) if "expires" in entry else None
    return Token(name, dig, max_jobs, max_output, rate, burst, expires)


def new_token(name: str) -> tuple[str, str]:
    """A fresh random token and the TOML table (with its digest) that admits it."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"token name {name!r}: use letters, digits, '_', '.', '-'")
    tok = "-"
    while tok.startswith("-"):  # a leading '-' would read as an option: `--token -x...`
        tok = secrets.token_urlsafe(32)
    return tok, (f"[tokens.{name}]\nsha256 = \"{digest(tok).hex()}\"\n"
                 f"max_jobs = {DEFAULT_MAX_JOBS}\nmax_output = \"10G\"\n")
