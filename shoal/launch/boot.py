"""``python -m shoal.launch.boot``: the local default's head and agent from one interpreter.

Started by :class:`shoal.launch.local.LocalCluster` (the *starter*). It imports once what
the head and the agent both import (ZeroMQ, msgpack, the transport, logging, argparse),
then forks the head and the agent, each in its own session, and waits for them: one
interpreter start and one set of shared imports instead of two, which is most of a cold
start's CPU. The head and the agent are the same processes as with ``python -m
shoal.head`` / ``python -m shoal.agent`` (same code, arguments, exit statuses); only their
parent is this process instead of the client.

Arguments: ``--status FD``, the head's arguments (``--connection FILE`` among them),
``--``, the agent's. On the status descriptor the starter writes ``head PID`` and ``agent
PID`` once both are forked, then ``exit PID STATUS`` (a ``waitpid`` status) as each exits,
and exits itself once both have. It dies with its parent (parent-death signal), and the
head and the agent with it. Each child shows its own command line (``python -m
shoal.head ...``, ``python -m shoal.agent ...``) in ``ps``, written over the starter's,
which holds both.
"""

from __future__ import annotations

import os
import sys


def _preload() -> None:
    """What both the head and the agent import (see ``python -X importtime``), and the
    standard modules only the agent needs: they cost the head's start little and shorten
    the agent's, the longer of the two."""
    import argparse  # noqa: F401
    import logging  # noqa: F401
    import shutil  # noqa: F401
    import subprocess  # noqa: F401
    import tempfile  # noqa: F401

    import msgpack  # noqa: F401
    import zmq  # noqa: F401

    import shoal._sys  # noqa: F401 - its parent-death signal loads ctypes in both
    import shoal.transport.connfile  # noqa: F401
    import shoal.transport.protocol  # noqa: F401
    import shoal.transport.session  # noqa: F401


def set_cmdline(words: list[str]) -> None:
    """Show ``words`` as this process's command line (``ps``, ``/proc/PID/cmdline``) by
    writing over the original one in place, as setproctitle(3) does (cut to its length)."""
    try:
        import ctypes

        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (proc(5))
        data = b"\0".join(os.fsencode(w) for w in words)[: end - start - 1]
        data += b"\0" * (end - start - len(data))
        ctypes.memmove(start, data, len(data))
    except (OSError, ValueError, IndexError):
        pass  # no /proc, an old kernel: the starter's command line shows


def _child(role: str, argv: list[str], connection: object, status_fd: int) -> None:
    """In a forked child: become the head or the agent; never returns."""
    code = 1
    try:
        os.close(status_fd)
        os.setsid()  # its own session: a Ctrl-C at the terminal reaches only the client
        set_cmdline([sys.orig_argv[0], "-m", f"shoal.{role}", *argv])
        if role == "head":
            from shoal.head.__main__ import main
        else:
            from shoal.agent.__main__ import main
        sys.argv = [f"python -m shoal.{role}", *argv]
        code = main(argv, connection=connection)  # type: ignore[arg-type]
    except SystemExit as exc:  # argparse, sys.exit
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report it as the interpreter would, then exit
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # not the starter's atexit handlers or buffers


def main() -> int:
    from shoal._sys import set_parent_death_signal

    set_parent_death_signal()  # the client's death stops the starter, and so both children
    argv = sys.argv[1:]
    try:
        status_fd = int(argv[argv.index("--status") + 1])
        sep = argv.index("--")
        head, agent = argv[2:sep], argv[sep + 1:]
        connfile = head[head.index("--connection") + 1]
        owner = int(head[head.index("--owner-pid") + 1]) if "--owner-pid" in head else 0
    except (ValueError, IndexError):
        print("usage: python -m shoal.launch.boot --status FD HEAD-ARGS -- AGENT-ARGS",
              file=sys.stderr)
        return 2
    if owner and os.getppid() != owner:
        return 1  # the client is gone already
    _preload()
    from shoal.transport.connfile import Connection

    try:
        connection = Connection.read(connfile)
    except (OSError, ValueError) as exc:
        print(f"python -m shoal.launch.boot: {exc}", file=sys.stderr)
        return 2
    pids: dict[int, str] = {}
    for role, args in (("head", head), ("agent", agent)):
        pid = os.fork()
        if pid == 0:
            _child(role, args, connection, status_fd)
        pids[pid] = role
    out = os.fdopen(status_fd, "w", buffering=1)

    def tell(line: str) -> None:
        try:
            out.write(line)
        except OSError:  # the client is gone: its children still get reaped here
            pass

    for pid, role in pids.items():
        tell(f"{role} {pid}\n")
    while pids:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pids.pop(pid, None) is not None:
            tell(f"exit {pid} {status}\n")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # at once: the client waits for this exit, not for a finalization
