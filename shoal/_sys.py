"""Small OS helpers shared by the head, agents and workers."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any


def alive(pid: int) -> bool:
    """True if a process with this pid exists and is not a zombie (a killed process
    whose parent has not reaped it yet is gone for our purposes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return True  # no /proc: trust kill(0)
    # the state follows the command name, which is in parentheses and may hold anything
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"


# The compiled process-control calls (shoal/_proc.c, built by setup.py where a C compiler
# exists): without them each process's start imports ctypes, ~3 ms of a cold start's
# critical path (the starter needs it before it forks the head and the agent).
# SHOAL_NO_CPROC=1 takes the ctypes path (the tests run both).
_proc: Any = None
if not os.environ.get("SHOAL_NO_CPROC"):
    try:
        from shoal import _proc  # type: ignore[attr-defined,no-redef]
    except ImportError:
        pass

_KEEP: list[object] = []  # environment strings move_environ copied (ctypes): never freed


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to signal this process when its parent dies, so a crash leaves no orphans."""
    if not sys.platform.startswith("linux"):
        return
    try:
        if _proc is not None:
            _proc.set_pdeathsig(int(sig))
            return
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(sig), 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; owner-pid watches still apply
        pass


def write_memory(address: int, data: bytes) -> None:
    """Copy ``data`` to ``address`` of this process (its command line's memory, for
    shoal.launch.boot.set_cmdline; the caller checks the bounds)."""
    if _proc is not None:
        _proc.write_at(address, data)
        return
    import ctypes

    ctypes.memmove(address, data, len(data))


def move_environ(start: int, end: int) -> bool:
    """Copy every C ``environ`` string that lies in [start, end) elsewhere (once a process:
    copies stay for its life, and its forks'), so that area may be overwritten; False when
    it could not. Python's ``os.environ`` is its own copy already; this keeps getenv(3)
    and exec right."""
    if _proc is not None:
        return bool(_proc.move_environ(start, end))
    import ctypes

    try:
        environ = ctypes.c_void_p.in_dll(ctypes.CDLL(None), "environ").value
    except (OSError, ValueError):
        return False
    if not environ:
        return True
    slots = ctypes.cast(environ, ctypes.POINTER(ctypes.c_void_p))
    i = 0
    while slots[i]:
        if start <= slots[i] < end:
            copy = ctypes.create_string_buffer(ctypes.string_at(slots[i]))
            _KEEP.append(copy)
            slots[i] = ctypes.addressof(copy)
        i += 1
    return True


def stop_on_signals(loop: object) -> None:
    """SIGTERM and SIGINT end ``loop`` in order (its loop checks ``loop.running``)."""

    def stop(*_: object) -> None:
        loop.running = False  # type: ignore[attr-defined]

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
