"""Errors and warnings of the script compiler; every one names a script line."""

from __future__ import annotations


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


class Unsupported(ScriptError):
    """A construct whose effect cannot be known before the script runs."""
