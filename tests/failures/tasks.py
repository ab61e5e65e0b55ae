"""Task functions of the failure tests, imported by reference in the agents' workers.

Every task that counts leaves a line in a ledger file opened with O_APPEND (one ``write``
per line, so lines of concurrent writers never interleave): the ledger counts executions,
the futures count deliveries.
"""

from __future__ import annotations

import os
import random
import re
import time


def append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def record(i: int, ledger: str, t: float = 0.0) -> tuple[int, int]:
    """Sleep ``t``, append ``i`` to the ledger; return (i, pid of the agent that ran it)."""
    if t:
        time.sleep(t)
    append(ledger, str(i))
    return i, os.getppid()


def record_start(i: int, ledger: str, t: float = 0.0) -> tuple[int, int, float]:
    """Append "i agent-pid start-time" when it starts, then sleep ``t``."""
    now = time.time()
    append(ledger, f"{i} {os.getppid()} {now:.6f}")
    if t:
        time.sleep(t)
    return i, os.getppid(), now


def flaky(i: int, ledger: str, t: float = 0.0, p: float = 0.1) -> tuple[int, int]:
    """Raise with probability ``p`` per attempt (seed 000's Figure 6); else ``record``."""
    if t:
        time.sleep(t)
    if random.random() < p:
        raise RuntimeError(f"task {i} failed at random")
    append(ledger, str(i))
    return i, os.getppid()


def spin(marker: str) -> None:
    """Never ends (pure Python, checks signals); announces itself in ``marker`` first."""
    append(marker, f"{os.getpid()} {os.getppid()}")
    while True:
        time.sleep(0.05)


def stuck_in_c(marker: str) -> bool:
    """Holds the GIL in C code, for practically ever (catastrophic regex backtracking)."""
    append(marker, f"{os.getpid()} {os.getppid()}")
    return re.fullmatch(r"(a+)+b", "a" * 64) is not None


def inc(x: int) -> int:
    return x + 1


def where(_: object = None) -> tuple[int, int]:
    """(worker pid, agent pid)."""
    return os.getpid(), os.getppid()


def slow_first_time(ledger: str, t: float) -> int:
    """Sleeps ``t`` on its first attempt (counted in ``ledger``), returns at once after."""
    append(ledger, str(os.getpid()))
    with open(ledger) as fh:
        n = len(fh.read().splitlines())
    if n == 1:
        time.sleep(t)
    return n


def die(ledger: str) -> None:
    """Kills its own worker (os._exit), every attempt; counted in ``ledger``."""
    append(ledger, str(os.getpid()))
    os._exit(3)
