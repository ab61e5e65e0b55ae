"""What an agent says about failures: result info, the OOM killer, allocation end times.

- ``failure_info``: the ``info`` of a failed RESULT (protocol.py): one line saying why and
  the raised class's MRO, so the head can apply ``retry_on`` without unpickling anything.
- ``OomWatch``: whether the kernel's out-of-memory killer killed something in this agent's
  cgroup since the last look (counter ``oom_kill``: cgroup v2 ``memory.events``, or v1
  ``memory.oom_control``).
- ``parse_walltime`` / ``allocation_end``: when this agent must be gone, for the drain.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

WHY_MAX = 300


def one_line(text: str, limit: int = WHY_MAX) -> str:
    """``text`` on one line (whitespace runs become one space), cut to ``limit`` chars."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def class_names(cls: type) -> list[str]:
    """``module.QualName`` of ``cls`` and every class in its MRO, in order."""
    return [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__]


def failure_info(exc: BaseException) -> dict[str, Any]:
    """RESULT info for a task that raised ``exc``."""
    return {"why": one_line(f"{type(exc).__name__}: {exc}"), "types": class_names(type(exc))}


def text_info(why: str) -> dict[str, Any]:
    """RESULT info for a failure that is not an exception (lost, timed out, launch error)."""
    return {"why": one_line(why), "types": []}


# ---- the OOM killer -----------------------------------------------------------------------
def oom_counter_file(proc_cgroup: str = "/proc/self/cgroup",
                     root: str = "/sys/fs/cgroup") -> str | None:
    """The file holding this process's cgroup ``oom_kill`` counter, or None.

    cgroup v2: ``memory.events`` of the unified hierarchy's cgroup; v1 (or a hybrid
    system whose memory controller is on v1): ``memory.oom_control`` of the memory one.
    """
    v2 = v1 = None
    try:
        with open(proc_cgroup) as fh:
            for line in fh:
                hier, _, rest = line.rstrip("\n").partition(":")
                controllers, _, path = rest.partition(":")
                if hier == "0" and controllers == "":
                    v2 = os.path.join(root, path.lstrip("/"), "memory.events")
                elif "memory" in controllers.split(","):
                    v1 = os.path.join(root, "memory", path.lstrip("/"), "memory.oom_control")
    except OSError:
        return None
    for cand in (v2, v1):
        if cand and os.path.exists(cand):
            return cand
    return None


def oom_kills(counter_file: str) -> int | None:
    """The ``oom_kill`` counter in a cgroup's counter file (None: unreadable)."""
    try:
        with open(counter_file) as fh:
            for line in fh:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


class OomWatch:
    """Tells whether the OOM killer struck in this cgroup (or below) since the last ask."""

    def __init__(self, counter_file: str | None = None) -> None:
        self.counter_file = counter_file if counter_file is not None else oom_counter_file()
        self.seen = oom_kills(self.counter_file) if self.counter_file else None

    def struck(self) -> bool:
        if self.counter_file is None or self.seen is None:
            return False
        now = oom_kills(self.counter_file)
        if now is None:
            return False
        rose, self.seen = now > self.seen, now
        return rose


# ---- allocation end times -------------------------------------------------------------------
_HMS = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+(?:\.\d*)?)$")


def parse_walltime(text: str) -> float:
    """Seconds from ``S``, ``M:S``, ``H:M:S`` or ``D-H:M:S`` (as Slurm writes them).

    Raises ValueError with a message naming the value when it is none of those.
    """
    m = _HMS.match(text.strip())
    if not m:
        raise ValueError(f"--walltime {text!r}: expected seconds, H:M:S or D-H:M:S")
    days, a, b, secs = m.groups()
    if b is None and a is not None:   # M:S
        hours, mins = 0, int(a)
    else:
        hours, mins = int(a or 0), int(b or 0)
    total = int(days or 0) * 86400 + hours * 3600 + mins * 60 + float(secs)
    if total <= 0:
        raise ValueError(f"--walltime {text!r}: must be more than 0 seconds")
    return total


def allocation_end(walltime: float | None, started: float,
                   environ: dict[str, str] | None = None) -> float | None:
    """The monotonic time this agent must be gone by: ``started + walltime`` or the batch
    job's end (``SLURM_JOB_END_TIME``, epoch seconds), whichever comes first; None: never."""
    env = os.environ if environ is None else environ
    ends = []
    if walltime is not None:
        ends.append(started + walltime)
    slurm = env.get("SLURM_JOB_END_TIME")
    if slurm:
        try:
            ends.append(time.monotonic() + float(slurm) - time.time())
        except ValueError:
            pass
    return min(ends) if ends else None
