"""Small OS helpers shared by the head, agents and workers."""

from __future__ import annotations

import os
import signal
import sys


def alive(pid: int) -> bool:
    """True if a process with this pid exists (and is not a zombie we could see)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
