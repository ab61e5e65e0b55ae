"""Small OS helpers shared by the head, agents and workers."""

from __future__ import annotations

import os
import signal
import sys


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


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to signal this process when its parent dies, so a crash leaves no orphans."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(sig), 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; owner-pid watches still apply
        pass


def stop_on_signals(loop: object) -> None:
    """SIGTERM and SIGINT end ``loop`` in order (its loop checks ``loop.running``)."""

    def stop(*_: object) -> None:
        loop.running = False  # type: ignore[attr-defined]

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
