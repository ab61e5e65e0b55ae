"""Caps an agent puts on what a task sends back, and the checks of agent arguments.

A command that prints a gigabyte or a Python task that returns one must not be held whole
in the agent, the head and the client at once. Each agent keeps at most ``max_output``
bytes of each captured stream of a command (the rest is dropped and a one-line marker
says so) and refuses Python results whose pickle is over ``max_result`` bytes (the task
fails with :class:`ResultTooLarge`; the run goes on).

The caps are per agent: ``shoal agent --max-output/--max-result`` or
``python -m shoal.agent --max-output/--max-result``, whose defaults come from the
environment variables ``SHOAL_MAX_OUTPUT`` and ``SHOAL_MAX_RESULT`` (so a local run, whose
agent inherits the caller's environment, can set them too), else 64 MiB and 256 MiB. They
are set once in the agent process before it forks its workers, which inherit them.
"""

from __future__ import annotations

import os
import re

DEFAULT_MAX_OUTPUT = 64 << 20
DEFAULT_MAX_RESULT = 256 << 20
OUTPUT_ENV = "SHOAL_MAX_OUTPUT"
RESULT_ENV = "SHOAL_MAX_RESULT"

OUTPUT_HELP = ("keep at most SIZE bytes of each captured stream of a command, then a line "
               "saying how much there was (default 64MiB, or $SHOAL_MAX_OUTPUT; 'unlimited')")
RESULT_HELP = ("fail Python tasks whose pickled result is over SIZE bytes instead of sending it "
               "(default 256MiB, or $SHOAL_MAX_RESULT; 'unlimited')")

# None: no cap. Set by configure() in the agent process; forked workers inherit them.
max_output: int | None = DEFAULT_MAX_OUTPUT
max_result: int | None = DEFAULT_MAX_RESULT


class ResultTooLarge(ValueError):
    """A task's result is bigger than its agent sends back (``--max-result``)."""


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1000, "m": 1 << 20, "mib": 1 << 20,
          "mb": 1000**2, "g": 1 << 30, "gib": 1 << 30, "gb": 1000**3, "t": 1 << 40, "tib": 1 << 40,
          "tb": 1000**4}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*")


def parse_size(text: str) -> int | None:
    """Bytes in ``text``: ``1048576``, ``64MiB``, ``64M`` and ``64m`` (2**20 each), ``64MB``
    (10**6 each), ``1.5GiB``; ``unlimited`` or ``none`` is None (no cap).

    Raises ValueError with a one-line message naming the text.
    """
    if text.strip().lower() in ("unlimited", "none"):
        return None
    m = _SIZE.fullmatch(text)
    unit = _UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise ValueError(f"{text!r} is not a size (give bytes, e.g. 1048576, 64MiB, 1.5GiB, "
                         "or 'unlimited')")
    return int(float(m.group(1)) * unit)


def format_size(n: float) -> str:
    """``n`` bytes for people: 512 bytes, 64 MiB, 1.2 GiB."""
    if n < 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
    raise AssertionError("not reached")


def configure(output: int | None, result: int | None) -> None:
    """Set this agent's caps (before it forks workers, so they inherit them)."""
    global max_output, max_result
    max_output, max_result = output, result


def check_counts(slots: int | None, workers: int | None) -> None:
    """Raise ValueError (a one-line message) when ``--slots``/``--workers`` cannot be used."""
    if slots is not None and slots < 1:
        raise ValueError(f"--slots must be at least 1 (got {slots}; leave it out to use every core)")
    if workers is not None and workers < 0:
        raise ValueError(f"--workers must be 0 or more (got {workers})")


def from_args(output: str | None, result: str | None) -> tuple[int | None, int | None]:
    """The caps from ``--max-output``/``--max-result`` texts; a flag not given is taken from
    its environment variable, else the default.

    Raises ValueError with a one-line message naming the flag or variable.
    """
    caps = []
    for flag, env, text, default in (("--max-output", OUTPUT_ENV, output, DEFAULT_MAX_OUTPUT),
                                     ("--max-result", RESULT_ENV, result, DEFAULT_MAX_RESULT)):
        where = flag
        if text is None:
            text, where = os.environ.get(env), env
        if text is None:
            caps.append(default)
            continue
        try:
            caps.append(parse_size(text))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    return caps[0], caps[1]


def truncation_marker(kept: int, total: int) -> bytes:
    """The line that ends a captured stream cut at ``kept`` of ``total`` bytes."""
    return (f"[shoal: output truncated at {format_size(kept)} of {format_size(total)} "
            f"({total} bytes); the agent's --max-output]\n").encode()


def result_too_large(what: str, size: int, limit: int) -> ResultTooLarge:
    """The error of a task whose pickled result (``size`` bytes) is over ``limit``."""
    return ResultTooLarge(f"the result of {what} is {format_size(size)}, over the "
                          f"{format_size(limit)} limit of this agent (--max-result); "
                          "return less, or write it to a file and return the path")
