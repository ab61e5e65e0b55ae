"""Launching command tasks: posix_spawn (vfork semantics), reaping, captured output.

These functions run in the agent's spawn helper (shoal.agent.spawner), which starts,
reaps and reads every command; the agent keeps a ``Running`` record per command for its
books, and ``kill`` on it goes to the helper. No Python interpreter is fork()ed per
command: ``os.posix_spawn`` uses a vfork-like clone in glibc.

Captured output goes to anonymous memory files (memfd), read once the command exits:
one event per command (its exit) instead of three (exit and EOF on two pipes), no pipe
buffer to keep draining, and a command is done when it exits even if a background
child of it keeps the streams open. (Files the child opens itself would spare the agent
two held descriptors per running command -- each spawn copies the descriptor table, which
slows launches when hundreds run -- but cost more per command than they saved: measured
W2 1,642-2,185/s with files against 2,126-2,278/s with memfds, alternating runs.)

Each captured stream is capped (``--max-output``, see shoal.agent.limits): a memfd is cut
back to the cap about once a second while its command runs, and only the cap is read
when it exits, with a line saying how much there was.

Where it was built (setup.py; ``SHOAL_NO_CSPAWN=1`` turns it off), the compiled module
``shoal.agent._spawnc`` starts the common command (``_spawn_plain``'s) and reaps for the
spawn helper: the same clone-and-exec as glibc's posix_spawn without its per-spawn stack
mapping, the environment converted once per configuration (see _spawnc.c). Every other
command, and every process without the module, goes the Python way below.
"""

from __future__ import annotations

import errno
import os
import pickle
import signal
import struct
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shoal.agent import limits
from shoal.agent.failures import failure_info
from shoal.agent.resources import bound_spawn
from shoal.agent.spawnline import direct_argv, shell_pwd
from shoal.task.command import CAPTURE, DEVNULL, INHERIT, CommandError, CommandResult
from shoal.task.errors import exception_payload
from shoal.transport import protocol as P

try:  # the compiled per-command path (optional: built where a C compiler was)
    from shoal.agent import _spawnc
except ImportError:  # pragma: no cover - depends on the build
    _spawnc = None

_DEVNULL_PATH = os.devnull
# Python ignores SIGPIPE and SIGXFSZ; a command must not inherit that (`yes | head -1`
# would end with "Broken pipe"), so they are back to their defaults in it, as
# subprocess's restore_signals does.
DEFAULT_SIGNALS = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFSZ", "SIGXFZ")
                        if hasattr(signal, n))


@dataclass(slots=True)
class Running:
    tid: int
    pid: int                        # 0 in the agent's record (the helper knows it)
    pidfd: int                      # unused: -1 (the helper reaps with waitid)
    spec: dict[str, Any]
    cores: int
    started: float
    captures: dict[str, int] = field(default_factory=dict)  # "stdout"/"stderr" -> memfd
    status: int | None = None
    popen: Any = None
    attempt: int | None = None      # of the dispatched spec, stamped on the result
    timeout: float | None = None    # seconds this attempt may run (opts "timeout")
    stopping: str | None = None     # why the agent signalled it: "timeout" | "drop"
    term_sent: float = 0.0          # when SIGTERM went at the time limit (0: not yet)
    cpus: list[int] | None = None   # CPU ids it is bound to (multi-core tasks, binding on)
    gpus: list[str] | None = None   # GPU ids it was given (opts "gpus")
    mpi: bool = False               # an MPI launcher (mpirun/srun) leads it: stop it gently
    kill_at: float = 0.0            # MPI: when SIGKILL follows the SIGTERM of kill() (0: none)
    launched: float = 0.0           # traced: time.monotonic() when the agent called spawn
    helper: Any = None              # the agent's shoal.agent.spawner.Spawner that runs it
    key: int = 0                    # its name between the agent and that helper


class LaunchError(Exception):
    pass


def _target(spec_value: str | None, tid: int, is_stdin: bool = False) -> str | None:
    if spec_value is None:
        return _DEVNULL_PATH if is_stdin else None
    return spec_value.replace("{id}", str(tid & 0xFFFFFFFF))


_devnull_in = -1
_devnull_out = -1


def _stdin_devnull() -> int:
    # one read-only /dev/null for every command's stdin, opened once
    global _devnull_in
    if _devnull_in < 0:
        _devnull_in = os.open(_DEVNULL_PATH, os.O_RDONLY | os.O_CLOEXEC)
    return _devnull_in


def _out_devnull() -> int:
    # one write-only /dev/null for every discarded stream (two opens and closes a command
    # less: `shoal run --discard-output` discards both)
    global _devnull_out
    if _devnull_out < 0:
        _devnull_out = os.open(_DEVNULL_PATH, os.O_WRONLY | os.O_CLOEXEC)
    return _devnull_out


def spawn(tid: int, spec: dict[str, Any], cores: int, base_env: dict[str, str], *,
          defaults: dict[str, str] | None = None, forced: dict[str, str | None] | None = None,
          cpus: list[int] | None = None, argv: list[str] | None = None) -> Running:
    """Start a command; raises LaunchError with a clear message if it cannot start.

    The slow path of tasks with resources (shoal.agent.resources) passes ``defaults``
    (variables the task's own env may override: OMP_NUM_THREADS), ``forced`` (variables it
    may not: its GPU devices; None unsets one), ``cpus`` (bind it to these CPU ids) and ``argv`` (the command
    as an MPI launcher runs it).

    It runs once per command in the spawn helper, whose CPU bounds short commands on a
    small node (issue 13): the common case -- no env, cwd or stdin, streams captured or
    discarded -- goes the shorter way of ``_spawn_plain``.
    """
    if argv is None:
        if not (defaults or forced or cpus):
            run = _spawn_plain(tid, spec, cores, base_env)
            if run is not None:
                return run
        argv = spec["argv"]
    get = spec.get
    if not argv:
        raise LaunchError("empty command")
    env = base_env
    if defaults or forced or get("env"):
        env = dict(base_env)
        if defaults:
            env.update(defaults)
        for k, v in (get("env") or {}).items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
        for k, v in (forced or {}).items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
    captures: dict[str, int] = {}
    opened: list[int] = []
    try:
        stdin = get("stdin")
        if stdin is None:
            stdin_fd = _stdin_devnull()
        else:
            stdin_fd = os.open(_target(stdin, tid, is_stdin=True), os.O_RDONLY | os.O_CLOEXEC)
            opened.append(stdin_fd)
        out_fd = _stream_fd(get("stdout"), "stdout", tid, captures, opened)
        err_fd = _stream_fd(get("stderr"), "stderr", tid, captures, opened)
    except OSError as exc:
        for fd in opened + list(captures.values()):
            os.close(fd)
        raise LaunchError(f"cannot open {exc.filename!r} for the command: {exc.strerror}") from None
    actions: list[tuple[Any, ...]] = [(_DUP2, stdin_fd, 0)]
    if out_fd >= 0:
        actions.append((_DUP2, out_fd, 1))
    if err_fd >= 0:
        actions.append((_DUP2, err_fd, 2))
    popen = None
    cwd = get("cwd")
    direct = direct_argv(argv) if argv is spec["argv"] and not cwd else None
    if direct is not None:  # one simple command: no shell in between (see spawnline)
        pid = _spawn_direct(direct, env, actions, cpus)
        if pid is not None:
            for fd in opened:
                os.close(fd)
            return Running(tid, pid, -1, spec, cores, _monotonic(), captures)
    try:
        if cwd:
            # posix_spawn cannot chdir; subprocess still uses vfork here
            popen = bound_spawn(
                cpus, subprocess.Popen, argv, cwd=cwd, env=env, close_fds=True,
                stdin=stdin_fd, stdout=_fd_for(actions, 1), stderr=_fd_for(actions, 2),
                start_new_session=True,
            )
            pid = popen.pid
        else:
            pid = _posix_start(argv, env, actions, cpus)
    except OSError as exc:
        for fd in captures.values():
            os.close(fd)
        raise _start_error(exc, argv, env, cwd) from None
    finally:
        for fd in opened:
            os.close(fd)
    return Running(tid, pid, -1, spec, cores, _monotonic(), captures, popen=popen)


_DUP2 = os.POSIX_SPAWN_DUP2
_posix_spawn = os.posix_spawn
_memfd_create = os.memfd_create
_monotonic = time.monotonic
_MEMFD_NAMES = {"stdout": "shoal-stdout", "stderr": "shoal-stderr"}
_PLAIN_KEYS = frozenset(("argv", "stdout", "stderr", "check"))
_PLAIN_MODES = (None, "", CAPTURE, DEVNULL)
stdin_at_0 = False  # this process's fd 0 is /dev/null (the spawn helper's): no stdin dup2


def _spawn_plain(tid: int, spec: dict[str, Any], cores: int,
                 base_env: dict[str, str]) -> Running | None:
    """``spawn`` of the common command -- no env, cwd or stdin, each stream captured or
    discarded (the Executor's ``Command``, ``shoal run``'s lines) -- in fewer steps; None
    when ``spec`` is not one (nothing was done)."""
    if len(spec) != 1:
        for k in spec:
            if k not in _PLAIN_KEYS:
                return None
        out_mode = spec.get("stdout")
        err_mode = spec.get("stderr")
        if out_mode not in _PLAIN_MODES or err_mode not in _PLAIN_MODES:
            return None
    else:
        out_mode = err_mode = None
    argv = spec["argv"]
    if not argv:
        raise LaunchError("empty command")
    if _c is not None:
        return _spawn_plain_c(_c, tid, spec, cores, base_env, argv, out_mode, err_mode)
    captures: dict[str, int] = {}
    try:  # (neither mode opens a file: nothing goes in _stream_fd's "opened")
        out_fd = _stream_fd(out_mode, "stdout", tid, captures, [])
        err_fd = _stream_fd(err_mode, "stderr", tid, captures, [])
    except OSError as exc:
        for fd in captures.values():
            os.close(fd)
        raise LaunchError(f"cannot open {exc.filename!r} for the command: {exc.strerror}") from None
    if stdin_at_0:  # the child inherits it: one dup2 (and glibc's getrlimit check) less
        actions = [(_DUP2, out_fd, 1), (_DUP2, err_fd, 2)]
    else:
        actions = [(_DUP2, _stdin_devnull(), 0), (_DUP2, out_fd, 1), (_DUP2, err_fd, 2)]
    direct = direct_argv(argv)
    if direct is not None:  # one simple command: no shell in between (see spawnline)
        pid = _spawn_direct(direct, base_env, actions, None)
        if pid is not None:
            return Running(tid, pid, -1, spec, cores, _monotonic(), captures)
    try:
        pid = _posix_start(argv, base_env, actions, None)
    except OSError as exc:
        for fd in captures.values():
            os.close(fd)
        raise _start_error(exc, argv, base_env, None) from None
    return Running(tid, pid, -1, spec, cores, _monotonic(), captures)


_c: Any = None  # the compiled module in use; None: the pure-Python path (use_compiled)
# Env objects of _spawnc for (base_env, base_env with the shell's PWD, its PATH), made once
# per environment the helper is configured with, not once per command
_c_envs: tuple[dict[str, str], Any, Any, str] | None = None


def use_compiled(on: bool | None = None) -> bool:
    """Whether ``_spawn_plain`` and the helper's reap go through ``shoal.agent._spawnc``:
    ``on``, or by default where it was built and ``SHOAL_NO_CSPAWN`` is not set. Returns
    whether they do."""
    global _c
    if on is None:
        on = not os.environ.get("SHOAL_NO_CSPAWN")
    _c = _spawnc if on else None
    return _c is not None


use_compiled()


def snapshot_signals() -> None:
    """Tell the compiled path which signals this process catches now (the spawn helper
    calls it once its handlers are in place): each command's child then resets those
    (and SIGPIPE, SIGXFSZ) without reading all 64 dispositions first, 12 us of every
    command's start (see _spawnc.c). Call it again after changing a handler."""
    if _c is not None:
        _c.snapshot_signals()


def _spawn_plain_c(c: Any, tid: int, spec: dict[str, Any], cores: int,
                   base_env: dict[str, str], argv: list[str], out_mode: str | None,
                   err_mode: str | None) -> Running:
    """``_spawn_plain`` through the compiled module: the same command started with the same
    streams, environment and signals, and the same errors (see _spawnc.c)."""
    global _c_envs
    out = -1 if not out_mode or out_mode == CAPTURE else _out_devnull()  # -1: a memfd
    err = -1 if not err_mode or err_mode == CAPTURE else _out_devnull()
    stdin = -1 if stdin_at_0 else _stdin_devnull()
    envs = _c_envs
    if envs is None or envs[0] is not base_env:
        fixed = _shell_env(base_env)
        plain = c.Env(base_env)
        envs = _c_envs = (base_env, plain, plain if fixed is base_env else c.Env(fixed),
                          base_env.get("PATH", os.defpath))
    direct = direct_argv(argv)
    if direct is not None:  # one simple command: no shell in between (see spawnline)
        try:
            pid, out_fd, err_fd = _c_start(c, direct, envs[2], envs[3], out, err, stdin)
        except OSError as exc:
            if not _shell_instead(exc):
                raise
        else:
            return Running(tid, pid, -1, spec, cores, _monotonic(),
                           _c_captures(out_fd, err_fd))
    try:
        pid, out_fd, err_fd = _c_start(c, argv, envs[1], envs[3], out, err, stdin)
    except OSError as exc:
        raise _start_error(exc, argv, base_env, None) from None
    return Running(tid, pid, -1, spec, cores, _monotonic(), _c_captures(out_fd, err_fd))


def _c_start(c: Any, argv: list[str], env: Any, path: str, out: int, err: int,
             stdin: int) -> tuple[int, int, int]:
    """``c.spawn`` of ``argv``, its program looked up on ``path`` here (as _posix_start)."""
    prog = argv[0]
    if "/" not in prog:
        prog = _resolve(prog, path)
    return c.spawn(prog, argv, env, out, err, stdin)


def _c_captures(out_fd: int, err_fd: int) -> dict[str, int]:
    if out_fd >= 0:
        return {"stdout": out_fd, "stderr": err_fd} if err_fd >= 0 else {"stdout": out_fd}
    return {"stderr": err_fd} if err_fd >= 0 else {}


def _posix_start(argv: list[str], env: dict[str, str], actions: list[tuple[Any, ...]],
                 cpus: list[int] | None) -> int:
    """``posix_spawn`` of ``argv`` in a session of its own, bound to ``cpus`` if given;
    the program is looked up on PATH here, once per program (_resolve), not by execvp in
    every child."""
    prog = argv[0]
    if "/" not in prog:
        prog = _resolve(prog, env.get("PATH", os.defpath))
    if cpus:
        return bound_spawn(cpus, os.posix_spawn, prog, argv, env, file_actions=actions,
                           setsid=True, setsigdef=DEFAULT_SIGNALS)
    return _posix_spawn(prog, argv, env, file_actions=actions, setsid=True,
                        setsigdef=DEFAULT_SIGNALS)


def _start_error(exc: OSError, argv: list[str], env: dict[str, str],
                 cwd: str | None) -> LaunchError:
    """Why a command could not start, in words."""
    if isinstance(exc, FileNotFoundError):
        what = exc.filename if exc.filename and exc.filename != argv[0] else argv[0]
        if cwd and not os.path.isdir(cwd):
            return LaunchError(f"working directory {cwd!r} does not exist")
        return LaunchError(f"command not found: {what!r}")
    if isinstance(exc, PermissionError):
        return LaunchError(f"permission denied: cannot execute {argv[0]!r}")
    if exc.errno == errno.E2BIG:  # e.g. a task-file line over MAX_ARG_STRLEN
        return LaunchError(_too_long(argv, env))
    return LaunchError(f"cannot start {argv[0]!r}: {exc.strerror}")


def _stream_fd(mode: str | None, name: str, tid: int, captures: dict[str, int],
               opened: list[int]) -> int:
    """The descriptor the command's ``name`` stream goes to; -1 for the agent's own."""
    if not mode or mode == CAPTURE:
        fd = captures[name] = _memfd_create(_MEMFD_NAMES[name], os.MFD_CLOEXEC)
        return fd
    if mode == DEVNULL:
        return _out_devnull()
    if mode == INHERIT:
        return -1
    fd = os.open(_target(mode, tid), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    opened.append(fd)
    return fd


_direct_env: tuple[dict[str, str], dict[str, str]] | None = None


def _spawn_direct(argv: list[str], env: dict[str, str], actions: list[tuple[Any, ...]],
                  cpus: list[int] | None) -> int | None:
    """Start ``argv`` as the shell would have started it; None when the shell must (the
    program is not found, cannot be executed, or is a script without ``#!``)."""
    try:
        return _posix_start(argv, _shell_env(env), actions, cpus)
    except OSError as exc:
        if _shell_instead(exc):
            return None
        raise


def _shell_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` as the shell would pass it on (its ``PWD``; see spawnline.shell_pwd): a
    command started without the shell gets the same environment. Made once per ``env``
    (the helper's base environment, the same object command after command)."""
    global _direct_env
    cached = _direct_env
    if cached is not None and cached[0] is env:
        return cached[1]
    pwd = shell_pwd(env)
    fixed = env if pwd is None else {**env, "PWD": pwd}
    _direct_env = (env, fixed)
    return fixed


def _shell_instead(exc: OSError) -> bool:
    """Whether a program that failed to start directly is for the shell to run (and to
    report on: 127, 126, a script without ``#!``)."""
    return isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError,
                            NotADirectoryError)) or exc.errno in (
        errno.ENOEXEC, errno.E2BIG, errno.ELOOP, errno.ENAMETOOLONG)


def _too_long(argv: list[str], env: dict[str, str]) -> str:
    """Why exec refused ``argv`` with E2BIG, in words."""
    longest = max(len(os.fsencode(a)) for a in argv)
    if longest >= 128 << 10:  # MAX_ARG_STRLEN: 32 pages, for any one string
        return (f"the command is too long to run ({limits.format_size(longest)} in one argument; "
                "Linux takes at most 128 KiB in one)")
    total = sum(len(os.fsencode(a)) + 1 for a in argv) + sum(
        len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items())
    return (f"the command and its environment are too long to run ({limits.format_size(total)}; "
            "Linux takes a quarter of the stack limit, often 2 MiB)")


_resolved: dict[tuple[str, str], str] = {}


def _resolve(name: str, path: str) -> str:
    """``name`` looked up on ``path`` like execvp would (found ones are remembered)."""
    key = (name, path)
    hit = _resolved.get(key)
    if hit is not None:
        return hit
    for d in path.split(os.pathsep):
        cand = os.path.join(d or ".", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            if d and os.path.isabs(d):  # a relative PATH entry depends on the cwd
                _resolved[key] = cand
            return cand
    raise FileNotFoundError(2, "No such file or directory", name)


def _fd_for(actions: list[tuple[Any, ...]], target: int) -> int | None:
    for a in actions:
        if a[2] == target:
            return a[1]
    return None


def _read_capture(fd: int, limit: int | None = None) -> bytes:
    """What a command wrote to its memfd (it has exited); the fd is closed.

    Past ``limit`` bytes only the first ``limit`` are kept, followed by a one-line marker
    with the full size, so no process downstream (agent, head, client) holds more.
    """
    try:
        # The write offset is shared with the command (same open file): it is how much the
        # command wrote even after trim_captures() cut the file short. The file's size
        # comes from a second lseek, not fstat (no stat result to build: most outputs
        # are empty); moving the offset is harmless, the file is closed next.
        size = _lseek(fd, 0, os.SEEK_CUR)
        end = _lseek(fd, 0, os.SEEK_END)
        if end < size:
            end = size
        elif not end:
            return b""
        size = end
        if limit is not None and size > limit:
            marker = limits.truncation_marker(limit, size)
            if limit and os.pread(fd, 1, limit - 1) != b"\n":
                marker = b"\n" + marker
            # Written after the kept bytes, to come back in the same read: no second copy.
            os.pwrite(fd, marker, limit)
            end = limit + len(marker)
        return pread_all(fd, end)
    finally:
        _close(fd)


_lseek = os.lseek
_close = os.close


def pread_all(fd: int, end: int) -> bytes:
    """Bytes 0..end of ``fd`` (a memfd or file), read from offset 0 whatever its position."""
    parts = []
    pos = 0
    while pos < end:
        data = os.pread(fd, end - pos, pos)
        if not data:
            break
        parts.append(data)
        pos += len(data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def trim_captures(runs: Iterable[Running]) -> None:
    """Free what running commands wrote past the output cap (called about once a second).

    A command's output stays in its memfd until it exits; one printing without end would
    fill the node's memory. Past the cap, the memfd is cut back to the cap: the command
    writes on undisturbed (its offset is kept, what follows the cut is a hole that takes no
    memory), so it holds at most the cap plus what it writes between two calls.
    """
    limit = limits.max_output
    if limit is None:
        return
    for run in runs:
        for fd in run.captures.values():
            try:
                if os.fstat(fd).st_size > limit:
                    os.ftruncate(fd, limit)
            except OSError:
                pass


def release(run: Running) -> None:
    """Close what a command holds without reading it (it was killed or revoked)."""
    for fd in run.captures.values():
        os.close(fd)
    run.captures = {}


def reap(run: Running) -> bool:
    """Collect the exit status of a command that exited; True when reaped.

    What the command left running in its session (background children) is killed
    first, as batch systems do at the end of a job step: the exited leader is still a
    zombie here, so its process group id cannot yet belong to anyone else.
    """
    try:
        os.killpg(run.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
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


_PEEK = os.WEXITED | os.WNOHANG | os.WNOWAIT  # an exited child, left to reap


def reap_exited(running: dict[int, Running]) -> list[Running]:
    """Reap every command of ``running`` (pid -> command) that has exited, as ``reap``
    does (its session killed first, then its status); a child that is not one of them
    is collected all the same. Through the compiled module when it is in use."""
    done: list[Running] = []
    if _c is not None:
        for pid, status in _c.reap():
            run = running.get(pid)
            if run is not None:
                run.status = status
                if run.popen is not None:
                    run.popen.returncode = status
                done.append(run)
        return done
    waitid = os.waitid
    while len(done) < len(running):
        try:
            info = waitid(os.P_ALL, 0, _PEEK)
        except ChildProcessError:
            break
        if info is None or not info.si_pid:
            break
        run = running.get(info.si_pid)
        if run is None:  # not a command of ours (cannot happen): collect it anyway
            try:
                os.waitpid(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                pass
            continue
        if not reap(run):
            break
        done.append(run)
    return done


def outcome(run: Running, now: float | None = None) -> tuple[int, bytes, dict[str, Any] | None]:
    """The RESULT status, payload and info of a finished command: a non-zero exit is an
    error with ``check=True``, else an OK result whose info says so (retries use it).
    ``now``: ``time.monotonic()`` when it was seen to exit (its duration ends there)."""
    cap = limits.max_output
    captures = run.captures
    out = _read_capture(captures["stdout"], cap) if "stdout" in captures else None
    err = _read_capture(captures["stderr"], cap) if "stderr" in captures else None
    run.captures = {}
    spec = run.spec
    argv = spec["argv"]
    shown: Any = argv[2] if len(argv) == 3 and argv[0] == "/bin/sh" and argv[1] == "-c" else argv
    rc = run.status if run.status is not None else -1
    duration = (_monotonic() if now is None else now) - run.started
    if rc == 0:
        return P.OK, _pickled_result(rc, out, err, shown, duration), None
    if spec.get("check"):
        exc = CommandError(rc, shown, out, err)
        return P.ERR, exception_payload(exc, ""), failure_info(exc)
    return (P.OK, _pickled_result(rc, out, err, shown, duration),
            {"why": f"exit status {rc}", "exit": rc})


_DURATION_MARK = -1.0546e-301            # a float no duration is: where the template splits
_pack_double = struct.Struct(">d").pack  # pickle's BINFLOAT: 8 bytes, big-endian
_templates: dict[Any, tuple[bytes, bytes]] = {}


def _pickled_result(rc: int, out: bytes | None, err: bytes | None, shown: Any,
                    duration: float) -> bytes:
    """``pickle.dumps(CommandResult(rc, out, err, shown, duration), protocol=5)``, the same
    bytes, made from a template when the command wrote nothing.

    A command with no output (most short ones) differs from the one before it only in its
    duration: the pickle of a CommandResult with that status and command is kept with the
    duration's 8 bytes cut out, and the result is the two halves around the new ones (a
    frozen dataclass built and pickled cost 3 us hot, more in the helper's cold caches).
    """
    if out or err or type(duration) is not float:
        return _result_pickle(rc, out, err, shown, duration)
    try:
        key = (rc, out is None, err is None, out is err, type(shown),
               shown if type(shown) is str else tuple(shown))
        halves = _templates.get(key)
    except TypeError:  # an unhashable argument: no template
        return _result_pickle(rc, out, err, shown, duration)
    if halves is None:
        if type(shown) is not str and not all(type(a) is str for a in shown):
            # only plain strings: an equal key then means the same pickle
            return _result_pickle(rc, out, err, shown, duration)
        data = _result_pickle(rc, out, err, shown, _DURATION_MARK)
        mark = b"G" + _pack_double(_DURATION_MARK)
        at = data.find(mark)
        if at < 0 or data.find(mark, at + 1) >= 0:  # cannot happen; no template then
            return _result_pickle(rc, out, err, shown, duration)
        if len(_templates) >= 256:
            _templates.clear()
        halves = _templates[key] = (data[:at + 1], data[at + 9:])
    return halves[0] + _pack_double(duration) + halves[1]


def _result_pickle(rc: int, out: bytes | None, err: bytes | None, shown: Any,
                   duration: float) -> bytes:
    return pickle.dumps(CommandResult(rc, out, err, shown, duration), protocol=5)


def timeout_text(run: Running, grace: float) -> str:
    """The payload of a command's TIMEOUT result (it has exited)."""
    limit = f"{run.timeout:g}" if run.timeout is not None else "?"
    rc = run.status
    if rc == -signal.SIGKILL and run.term_sent:
        how = f"killed with SIGKILL after ignoring SIGTERM for {grace:g} s"
    elif rc is not None and rc < 0:
        how = f"killed with {signal.Signals(-rc).name if -rc in _SIGNALS else -rc}"
    else:
        how = f"stopped with SIGTERM, exit status {rc}"
    return f"timed out after {limit} s ({how})"


_SIGNALS = {s.value for s in signal.Signals}
MPI_KILL_GRACE = 3.0


def kill_overdue(runs: Iterable[Running], now: float) -> None:
    """SIGKILL the MPI launchers that outlived the grace after their SIGTERM."""
    for run in runs:
        if run.kill_at and now >= run.kill_at and run.status is None:
            run.kill_at = -1.0  # once
            _signal(run, signal.SIGKILL)


def kill(run: Running, sig: int = signal.SIGKILL) -> None:
    """Signal the command's whole process group. An MPI launcher asked to die gets SIGTERM
    first (mpirun and srun then stop every rank, on every node; a SIGKILLed one would leave
    the remote ranks behind) and SIGKILL ``MPI_KILL_GRACE`` seconds later
    (``kill_overdue``), unless its time limit's SIGTERM went already."""
    if run.mpi and sig == signal.SIGKILL and not run.kill_at and not run.term_sent:
        run.kill_at = time.monotonic() + MPI_KILL_GRACE
        sig = signal.SIGTERM
    _signal(run, sig)


def _signal(run: Running, sig: int) -> None:
    if run.helper is not None:  # the spawn helper's child: it signals it (by task id)
        run.helper.kill(run.key, sig, run.stopping)
    else:
        kill_group(run.pid, sig)


def kill_group(pid: int, sig: int) -> None:
    """Signal a command's process group (it runs in its own session: its children too)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
