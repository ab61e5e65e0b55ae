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

When the client itself can fork safely (one thread, on Linux: :func:`can_fork_here`), the
starter is not a new interpreter but a fork of the client (:func:`fork_starter`): it has
the client's interpreter and imports already, which takes a fresh interpreter's start and
most of the shared imports off a cold start's critical path. The forked starter is made
as clean as a new process: its own session, stdin from /dev/null, no inherited
descriptors but 0-2, default signal handlers and mask, fresh ``sys.std*`` objects (the
client's unflushed buffers are never written twice) and no logging handlers of the
client's; it never returns into the client's code (``os._exit``).
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

    import shoal._sys  # noqa: F401 - the parent-death signal of both (and set_cmdline)
    import shoal.transport.connfile  # noqa: F401
    import shoal.transport.protocol  # noqa: F401
    import shoal.transport.session  # noqa: F401


_KEEP: list[object] = []  # what a forked starter must never free (see _clean_fork)


def set_cmdline(words: list[str]) -> None:
    """Show ``words`` as this process's command line (``ps``, ``/proc/PID/cmdline``) by
    writing over the original one in place, as setproctitle(3) does. When they do not fit
    (a starter forked from a client with a short command line) they run on into the
    environment strings, which follow, after the C library's environment is copied out of
    the way: the kernel then shows them as one string, words apart by spaces (its rule for
    a command line whose last byte is no longer NUL). Cut to what fits otherwise."""
    from shoal._sys import move_environ, write_memory

    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        # arg_start, arg_end, env_start, env_end (proc(5))
        start, end, env_start, env_end = (int(f) for f in fields[45:49])
        data = b"\0".join(os.fsencode(w) for w in words) + b"\0"
        if len(data) > end - start and env_start == end and len(data) < env_end - start \
                and move_environ(env_start, env_end):
            data = data[:-1].replace(b"\0", b" ") + b"\0"
            write_memory(start, data + b"\0" * (env_end - start - len(data)))
            return
        data = data[: end - start - 1]
        data += b"\0" * (end - start - len(data))
        write_memory(start, data)
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
    """``python -m shoal.launch.boot``: the starter as a new interpreter."""
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
    return run(head, agent, connection, status_fd)


def run(head: list[str], agent: list[str], connection: object, status_fd: int) -> int:
    """Fork the head and the agent, report on ``status_fd``, reap both, return 0."""
    pids: dict[int, str] = {}
    # the agent first: its start (its modules, the spawn helper and workers it forks) is
    # the longer; the head is needed only once the agent says HELLO
    for role, args in (("agent", agent), ("head", head)):
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


def can_fork_here() -> bool:
    """Whether this process may fork the starter instead of starting a new interpreter:
    Linux, and only one thread (any other, a ZeroMQ I/O thread or a library's, could hold
    a lock the child would then wait on for ever). ``SHOAL_FORK=0`` turns it off."""
    if os.environ.get("SHOAL_FORK", "1") == "0" or not hasattr(os, "pidfd_open"):
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def fork_starter(head: list[str], agent: list[str], connection: object) -> tuple[int, int]:
    """Fork the starter from this (single-threaded) process: ``(pid, status read fd)``.
    The child cleans itself (:func:`_clean_fork`), imports what the head and the agent
    share, and runs :func:`run`; it never returns here."""
    rfd, wfd = os.pipe()
    client = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            wfd = _clean_fork(wfd)
            from shoal._sys import set_parent_death_signal

            set_parent_death_signal()
            if os.getppid() != client:
                os._exit(1)  # the client died before the signal was set
            set_cmdline([sys.orig_argv[0], "-m", "shoal.launch.boot", "--forked"])
            sys.argv = ["python -m shoal.launch.boot", "--forked"]
            _preload()
            code = run(head, agent, connection, wfd)
        except BaseException:  # noqa: BLE001 - report it as the interpreter would
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(wfd)
    return pid, rfd


def _clean_fork(keep: int) -> int:
    """In a starter just forked from a client: leave nothing of the client's process
    state that a new interpreter would not have. Returns ``keep``'s new number."""
    import signal

    os.setsid()  # its own session: a Ctrl-C at the terminal reaches only the client
    if keep < 3:
        keep = os.dup(keep)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    # the client's objects that own a closed descriptor must never be freed (their close
    # would hit a descriptor this process reuses): hold the ones let go below
    _KEEP.extend((sys.stdin, sys.stdout, sys.stderr))
    import io

    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stdout = io.TextIOWrapper(open(1, "wb", 0, closefd=False), line_buffering=True,  # noqa: SIM115
                                  write_through=True, errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(open(2, "wb", 0, closefd=False), line_buffering=True,  # noqa: SIM115
                                  write_through=True, errors="backslashreplace")
    sys.excepthook = sys.__excepthook__
    if "faulthandler" in sys.modules:  # the client's may write to a descriptor closed above
        import faulthandler

        if faulthandler.is_enabled():
            faulthandler.disable()
            if os.environ.get("PYTHONFAULTHANDLER"):
                faulthandler.enable()
    if "logging" in sys.modules:  # the head's and agent's basicConfig must take effect
        import logging

        root = logging.getLogger()
        _KEEP.extend(root.handlers)
        root.handlers = []
        logging.disable(logging.NOTSET)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
            if sig == signal.SIGINT:
                signal.signal(sig, signal.default_int_handler)
            elif sig in (signal.SIGPIPE, signal.SIGXFSZ):  # as the interpreter sets them
                signal.signal(sig, signal.SIG_IGN)
            elif callable(handler) or handler is None:  # a handler of the client's
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            continue
    return keep


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # at once: the client waits for this exit, not for a finalization
