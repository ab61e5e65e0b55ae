"""Errors and warnings of the script compiler; every one names a script line."""

from __future__ import annotations

import re


class ScriptError(Exception):
    """The script cannot be compiled: syntax error, unsupported construct, bad input or output.

    ``str(err)`` is one line, ``SCRIPT:LINE: message``, the form compilers use.
    """

    def __init__(self, message: str, line: int | None = None, script: str = "script") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.script = script

    def __str__(self) -> str:
        where = f"{self.script}:{self.line}" if self.line is not None else self.script
        return f"{where}: {self.message}"


# "x is not supported", "x not supported (why)": the class adds that part itself
_NOT_SUPPORTED = re.compile(r"[:,]?\s+(?:is |are )?not supported\b")
SUFFIX = "not supported; run it with bash"


class Unsupported(ScriptError):
    """A construct whose effect cannot be known before the script runs (or is not modelled).

    ``message`` names the construct (and why, if useful); ``str(err)`` is always
    ``SCRIPT:LINE: CONSTRUCT: not supported; run it with bash``, so every refusal tells the user
    what to do, from this one place.
    """

    def __init__(self, message: str, line: int | None = None, script: str = "script") -> None:
        message = _NOT_SUPPORTED.sub("", message).rstrip(" :;.")
        super().__init__(message, line, script)

    def __str__(self) -> str:
        return f"{super().__str__()}: {SUFFIX}"
