"""Launching command tasks: posix_spawn (vfork semantics), pidfds, captured output.

The agent never fork()s a Python interpreter per command: ``os.posix_spawnp`` uses
vfork-like clone in glibc, and process exit is observed through a pidfd, so launching
and reaping are events in the agent's single poll loop, not threads.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from shoal.client.command import CAPTURE, DEVNULL, INHERIT, CommandError, CommandResult
from shoal.client.future import exception_payload
from shoal.transport import protocol as P

_DEVNULL_PATH = os.devnull


@dataclass
class Running:
    tid: int
    pid: int
    pidfd: int
    spec: dict[str, Any]
    cores: int
    started: float
    pipes: dict[int, list[bytes]] = field(default_factory=dict)  # fd -> chunks
    which: dict[int, str] = field(default_factory=dict)          # fd -> "stdout"/"stderr"
    status: int | None = None
    popen: Any = None


class LaunchError(Exception):
    pass


def _target(spec_value: str | None, tid: int, is_stdin: bool = False) -> str | None:
    if spec_value is None:
        return _DEVNULL_PATH if is_stdin else None
    return spec_value.replace("{id}", str(tid & 0xFFFFFFFF))


def spawn(tid: int, spec: dict[str, Any], cores: int, base_env: dict[str, str]) -> Running:
    """Start a command; raises LaunchError with a clear message if it cannot start."""
    argv = spec["argv"]
    if not argv:
        raise LaunchError("empty command")
    env = base_env
    if spec.get("env"):
        env = dict(base_env)
        for k, v in spec["env"].items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
    pipes: dict[int, list[bytes]] = {}
    which: dict[int, str] = {}
    opened: list[int] = []
    actions: list[tuple[Any, ...]] = []
    try:
        stdin_path = _target(spec.get("stdin"), tid, is_stdin=True)
        fd = os.open(stdin_path, os.O_RDONLY | os.O_CLOEXEC)
        opened.append(fd)
        actions.append((os.POSIX_SPAWN_DUP2, fd, 0))
        for name, target_fd in (("stdout", 1), ("stderr", 2)):
            mode = spec.get(name) or CAPTURE
            if mode == INHERIT:
                continue
            if mode == CAPTURE:
                r, w = os.pipe2(os.O_CLOEXEC)
                os.set_blocking(r, False)
                opened.append(w)
                pipes[r] = []
                which[r] = name
                actions.append((os.POSIX_SPAWN_DUP2, w, target_fd))
            else:
                path = _DEVNULL_PATH if mode == DEVNULL else _target(mode, tid)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                opened.append(fd)
                actions.append((os.POSIX_SPAWN_DUP2, fd, target_fd))
    except OSError as exc:
        for fd in opened + list(pipes):
            os.close(fd)
        raise LaunchError(f"cannot open {exc.filename!r} for the command: {exc.strerror}") from None
    popen = None
    try:
        if spec.get("cwd"):
            # posix_spawn cannot chdir; subprocess still uses vfork here
            popen = subprocess.Popen(
                argv, cwd=spec["cwd"], env=env, close_fds=True,
                stdin=opened[0], stdout=_fd_for(actions, 1), stderr=_fd_for(actions, 2),
                start_new_session=True,
            )
            pid = popen.pid
        else:
            pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True)
    except FileNotFoundError as exc:
        for fd in list(pipes):
            os.close(fd)
        what = exc.filename if exc.filename and exc.filename != argv[0] else argv[0]
        if spec.get("cwd") and not os.path.isdir(spec["cwd"]):
            raise LaunchError(f"working directory {spec['cwd']!r} does not exist") from None
        raise LaunchError(f"command not found: {what!r}") from None
    except PermissionError:
        for fd in list(pipes):
            os.close(fd)
        raise LaunchError(f"permission denied: cannot execute {argv[0]!r}") from None
    except OSError as exc:
        for fd in list(pipes):
            os.close(fd)
        raise LaunchError(f"cannot start {argv[0]!r}: {exc.strerror}") from None
    finally:
        for fd in opened:
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    return Running(tid, pid, pidfd, spec, cores, time.monotonic(), pipes, which, popen=popen)


def _fd_for(actions: list[tuple[Any, ...]], target: int) -> int | None:
    for a in actions:
        if a[2] == target:
            return a[1]
    return None


def read_pipe(run: Running, fd: int) -> bool:
    """Read what is there; returns True at EOF (the fd is then closed)."""
    chunks = run.pipes[fd]
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not data:
            os.close(fd)
            return True
        chunks.append(data)


def reap(run: Running) -> bool:
    """Collect the exit status once the pidfd said so; True when reaped."""
    try:
        pid, status = os.waitpid(run.pid, os.WNOHANG)
    except ChildProcessError:
        run.status = -1
        return True
    if pid == 0:
        return False
    run.status = os.waitstatus_to_exitcode(status)
    if run.popen is not None:
        run.popen.returncode = run.status
    return True


def outcome(run: Running) -> tuple[int, bytes]:
    """The RESULT status and payload of a finished command."""
    out = err = None
    for fd, name in run.which.items():
        data = b"".join(run.pipes.get(fd, ()))
        if name == "stdout":
            out = data
        else:
            err = data
    spec = run.spec
    argv = spec["argv"]
    shown: Any = argv[2] if len(argv) == 3 and argv[:2] == ["/bin/sh", "-c"] else argv
    rc = run.status if run.status is not None else -1
    res = CommandResult(rc, out, err, shown, time.monotonic() - run.started)
    if spec.get("check") and rc != 0:
        return P.ERR, exception_payload(CommandError(rc, shown, out, err), "")
    return P.OK, pickle.dumps(res, protocol=5)


def kill(run: Running, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(run.pid, sig)  # the command runs in its own session: take its children too
    except ProcessLookupError:
        pass
    except PermissionError:
        try:
            os.kill(run.pid, sig)
        except ProcessLookupError:
            pass
