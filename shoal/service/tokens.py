"""Tokens of ``shoal serve``: who may submit, and how much.

The tokens file is TOML, one table per user::

    [tokens.alice]
    sha256 = "9f86d081884c7d65..."   # hex SHA-256 of the token (preferred: the file holds no secret)
    max_jobs = 2                     # queued + running jobs at once (default 4)
    max_output = "20G"               # bytes kept in this token's job directories (default 10G)

    [tokens.ci]
    token = "a-long-random-string"   # the token itself; then the file must not be readable by others

``shoal serve --new-token NAME`` prints a fresh token and the table to paste. A request names its
token in ``Authorization: Bearer TOKEN``; it is compared in constant time against every known
token's digest, so the answer time says nothing about which token came close.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import sys
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Token:
    """One user of the service."""

    name: str
    sha256: bytes
    max_jobs: int = DEFAULT_MAX_JOBS
    max_output: int = DEFAULT_MAX_OUTPUT


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
        out: list[Token] = []
        seen: set[bytes] = set()
        for name, entry in table.items():
            where = f"{path}: [tokens.{name}]"
            if not isinstance(entry, dict):
                raise TokensError(f"{where}: not a table")
            unknown = set(entry) - {"sha256", "token", "max_jobs", "max_output"}
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
                max_jobs = entry.get("max_jobs", DEFAULT_MAX_JOBS)
                if not isinstance(max_jobs, int) or isinstance(max_jobs, bool) or max_jobs < 1:
                    raise ValueError(f"max_jobs must be a whole number >= 1, not {max_jobs!r}")
                max_output = parse_size(entry.get("max_output", DEFAULT_MAX_OUTPUT), "max_output")
            except ValueError as exc:
                raise TokensError(f"{where}: {exc}")
            out.append(Token(str(name), dig, max_jobs, max_output))
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


def new_token(name: str) -> tuple[str, str]:
    """A fresh random token and the TOML table (with its digest) that admits it."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"token name {name!r}: use letters, digits, '_', '.', '-'")
    tok = "-"
    while tok.startswith("-"):  # a leading '-' would read as an option: `--token -x...`
        tok = secrets.token_urlsafe(32)
    return tok, (f"[tokens.{name}]\nsha256 = \"{digest(tok).hex()}\"\n"
                 f"max_jobs = {DEFAULT_MAX_JOBS}\nmax_output = \"10G\"\n")
