"""Commands start in a helper process, not in the agent (issue 13).

``posix_spawn`` blocks its caller until the child has exec'd (vfork semantics): 0.1 ms
alone, 0.6 ms when the child first waits for a core. In the agent's one loop, that wait held
back everything else -- results, tasks from the head, the exit of the other slot's command
-- so at 2,000 short commands both slots were busy only a third of the time. The spawn
helper is a process of its own, forked by the agent before it has a ZeroMQ context, a
worker or a command (a small descriptor table for every spawn to copy), that does the
process work of ``shoal.agent.launcher``: it starts commands, reaps them (SIGCHLD, then
``waitid(P_ALL)``), reads their output and builds their results, and talks to the agent in
batches over a ``SOCK_SEQPACKET`` socket pair.

Like ``xargs -P`` it refills a freed core itself: the agent may hand it short one-core
commands ahead of free cores (a few milliseconds of work, see ``Commands``), and the
helper starts the next one the moment one exits, while ``cap`` cores (what the agent's
Python workers leave) are in use at most. Everything else -- which command may start,
time limits, cancels, the drain, the books of cores and GPUs -- stays in the agent, which
sends ``kill`` requests by task id: only the helper knows whether a pid is still its
unreaped child, so no signal can reach a recycled pid.

Messages are pickled lists of tuples; one over ``MAX_MSG`` travels in a memfd whose
descriptor goes along (SCM_RIGHTS). A command is named by a key the agent gives it (a task
may come back as a new attempt while its killed one is still being reaped). Agent ->
helper: ``("run", key, tid, spec, cores, defaults,
forced, cpus, argv, mpi)``, ``("cap", cores, seq)``, ``("kill", key, signal, why)``
(``why``: "drop" or "timeout" -- the output is not read), ``("config", base_env,
max_output)``. Helper -> agent: ``(key, rc, started, ended, status, payload, info)`` for a
command that exited (rc None: dropped before it started; status None: its output was not
wanted), ``(key, None, 0.0, 0.0, None, message, None)`` for one that could not start
(``started`` and ``ended`` are ``time.monotonic()`` values, the same clock in both
processes), and ``("cap", seq, used)``, sent at once, for each cap taken (``used``: the
cores its commands held then).

Nothing is left behind when the agent dies, even by SIGKILL of its whole process group
(the helper has a group of its own): the helper sees the socket's end-of-file (and, as a
second signal, SIGHUP by PR_SET_PDEATHSIG), kills every command's process group -- an MPI
launcher gets SIGTERM and ``MPI_KILL_GRACE`` seconds first, so it can stop its remote
ranks -- reaps them, removes the agent's temporary directory (its workers' socket) and
exits. Processes the agent forks later (its workers) close their
copy of the agent's end at fork, so they cannot keep it open.
"""

from __future__ import annotations

import array
import math
import os
import pickle
import select
import signal
import socket
import sys
import time
from collections import deque
from typing import Any

from shoal._sys import set_parent_death_signal
from shoal.agent import launcher, limits

MAX_MSG = 60 << 10        # bigger messages go in a memfd (SEQPACKET: one message per send)
SOCK_BUF = 1 << 20
BLOB = b"F"               # marks a message whose pickle is in the attached memfd
_FD_SPACE = socket.CMSG_SPACE(4)
REPORT_DELAY_S = 0.02     # a report waits at most this long for others (see _loop)
REPORT_BATCH = 256
TRIM_S = 1.0              # how often output over --max-output is cut back

_agent_fds: set[int] = set()  # the agent's ends, closed in every process it forks later


def _close_in_child() -> None:
    for fd in _agent_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    _agent_fds.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _encode(obj: Any) -> tuple[bytes, list[int]]:
    data = pickle.dumps(obj, protocol=5)
    if len(data) <= MAX_MSG:
        return data, []
    fd = os.memfd_create("shoal-spawn-msg", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return BLOB, [fd]


def _decode(data: bytes, fds: list[int]) -> Any:
    if data == BLOB and fds:
        fd = fds[0]
        try:
            data = launcher.pread_all(fd, os.fstat(fd).st_size)
        finally:
            for f in fds:
                os.close(f)
    else:
        for f in fds:
            os.close(f)
    return pickle.loads(data)


def _recv(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """One message without waiting: (data, fds); None when there is none; EOFError at the
    other end's close."""
    try:  # (socket.recv_fds drops its flags argument before Python 3.12)
        data, anc, _flags, _addr = sock.recvmsg(MAX_MSG + 64, _FD_SPACE, socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return None
    except (ConnectionResetError, BrokenPipeError):
        raise EOFError from None
    fds: list[int] = []
    for level, kind, blob in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += array.array("i", blob[: len(blob) - len(blob) % 4])
    if not data and not fds:
        raise EOFError
    return data, fds


class Spawner:
    """The agent's end of the spawn helper (module docstring): queue requests, ``flush``
    them at the end of a turn, ``receive`` what finished."""

    def __init__(self, agent_dir: str | None = None) -> None:
        """``agent_dir``: the agent's own temporary directory, which the helper removes
        when the agent is gone (a SIGKILLed agent cannot)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for s in (mine, theirs):
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                try:
                    s.setsockopt(socket.SOL_SOCKET, opt, SOCK_BUF)
                except OSError:
                    pass
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the helper: never returns
            code = 1
            try:
                mine.detach()
                code = _Helper(theirs, agent_dir).main()
            finally:
                os._exit(code)
        theirs.close()
        mine.setblocking(False)
        self.sock = mine
        self.pid = pid
        self.ops: list[tuple[Any, ...]] = []
        self.pending: deque[tuple[bytes, list[int]]] = deque()  # refused by a full socket
        self.closed = False
        self.index = 0            # which of the agent's helpers (shoal.agent.commands)
        self.waiting_out = False  # its socket was full: the agent polls it for room
        self.cap_seq = 0
        _agent_fds.add(mine.fileno())

    def fileno(self) -> int:
        return self.sock.fileno()

    def config(self, base_env: dict[str, str], max_output: int | None) -> None:
        self.ops.append(("config", base_env, max_output))

    def run(self, key: int, tid: int, spec: dict[str, Any], cores: int, *,
            defaults: dict[str, str] | None = None, forced: dict[str, str | None] | None = None,
            cpus: list[int] | None = None, argv: list[str] | None = None,
            mpi: bool = False) -> None:
        self.ops.append(("run", key, tid, spec, cores, defaults, forced, cpus, argv, mpi))

    def cap(self, cores: int, ack: bool = False) -> int:
        """Run at most ``cores`` cores of commands from now on. ``ack``: the helper
        acknowledges it with a report ``("cap", seq, used)`` (what it ran as it took it);
        returns the number (0: none asked)."""
        seq = 0
        if ack:
            self.cap_seq += 1
            seq = self.cap_seq
        self.ops.append(("cap", cores, seq))
        return seq

    def kill(self, key: int, sig: int, why: str | None) -> None:
        self.ops.append(("kill", key, sig, why))

    def flush(self) -> bool:
        """Send what was asked this turn; False while some waits for room (poll POLLOUT)."""
        if self.closed:
            self.ops = []
            return True
        if self.ops:
            ops, self.ops = self.ops, []
            self.pending.append(_encode(ops))
        while self.pending:
            data, fds = self.pending[0]
            try:
                if fds:
                    socket.send_fds(self.sock, [data], fds, socket.MSG_DONTWAIT)
                else:
                    self.sock.send(data, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return False
            except (BrokenPipeError, ConnectionResetError):
                self.pending.clear()  # the helper is gone: receive() says so
                return True
            self.pending.popleft()
            for fd in fds:
                os.close(fd)
        return True

    def receive(self) -> list[tuple[Any, ...]]:
        """What the helper reported since the last call (EOFError: the helper is gone)."""
        out: list[tuple[Any, ...]] = []
        while True:
            msg = _recv(self.sock)
            if msg is None:
                return out
            out.extend(_decode(*msg))

    def close(self, wait_s: float | None) -> None:
        """Let the helper stop every command (its end-of-file); wait for it to exit at
        most ``wait_s`` seconds (None: not now), then SIGKILL it."""
        if not self.closed:
            self.closed = True
            for _, fds in self.pending:
                for fd in fds:
                    os.close(fd)
            self.pending.clear()
            _agent_fds.discard(self.sock.fileno())
            self.sock.close()
        if wait_s is None:
            return
        if not wait_child(self.pid, wait_s):
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def wait_child(pid: int, timeout: float) -> bool:
    """Reap the child ``pid`` as soon as it exits, within ``timeout`` seconds: True when
    it was reaped (or was already), False when it still runs.

    It waits on a pidfd, which is readable the moment the child exits: the agent's stop
    used to poll every 5 ms, and the helper, which exits within a millisecond of its
    socket's close, cost 3-5 ms of every `shoal run`'s stop that way."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # not a process any more: reaped already
        return True
    except OSError:  # no pidfd here (before Linux 5.3): poll
        fd = -1
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return True
            if done:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if fd >= 0:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(0.005, left))
    finally:
        if fd >= 0:
            os.close(fd)


class _AgentGone(Exception):
    pass


class _ChildExited(Exception):
    """Raised by the SIGCHLD handler to end the helper's poll (see _Helper._loop)."""


class _Helper:
    """The helper process's loop (module docstring)."""

    def __init__(self, sock: socket.socket, agent_dir: str | None = None) -> None:
        self.sock = sock
        self.agent_dir = agent_dir
        self.queue: deque[tuple[Any, ...]] = deque()
        self.running: dict[int, launcher.Running] = {}   # pid -> command
        self.by_key: dict[int, launcher.Running] = {}
        self.why: dict[int, str] = {}                    # key -> why the agent stopped it
        self.used = 0
        self.cap = 1 << 30
        self.base_env = dict(os.environ)
        self.out: list[tuple[Any, ...]] = []
        self.child_flag = False  # a SIGCHLD came since the last reap
        self.ack_now = False     # a cap to acknowledge: report this turn
        self.in_poll = False     # the loop is in (or about to enter) poll: see _loop
        self.hup = False         # a SIGHUP came: the agent is gone (see _hangup)

    def main(self) -> int:
        keep = {self.sock.fileno(), 0, 1, 2}
        for name in os.listdir("/proc/self/fd"):  # what the agent had open is not ours
            fd = int(name)
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        launcher._devnull_in = launcher._devnull_out = -1  # were the agent's, if opened
        # Commands read /dev/null unless told otherwise: as the helper's own stdin (it never
        # reads one) every command inherits it, without a dup2 per spawn.
        null = os.open(os.devnull, os.O_RDONLY)
        if null != 0:
            os.dup2(null, 0)
            os.close(null)
        else:
            os.set_inheritable(0, True)
        launcher.stdin_at_0 = True
        launcher.use_compiled()  # (SHOAL_NO_CSPAWN as this process sees it)
        try:  # a group of its own: a kill -9 of the agent's process group leaves it to clean up
            os.setpgid(0, 0)
        except OSError:
            pass
        # The agent handles SIGINT and SIGTERM (a drain lets running commands finish): the
        # helper leaves only with the agent (end-of-file, or SIGHUP when it dies). They are
        # caught, not ignored: an exec resets a caught signal to its default, while an
        # ignored one would stay ignored in every command. (One the agent was started
        # with ignored, as by nohup, stays ignored, as it did for commands before.)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGQUIT):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, _noop)
        signal.signal(signal.SIGHUP, self._hangup)
        signal.signal(signal.SIGCHLD, self._child_exited)
        set_parent_death_signal(signal.SIGHUP)
        launcher.snapshot_signals()  # (the handlers above: the ones each command resets)
        try:
            if os.getppid() == 1:
                raise _AgentGone
            self._loop()
        except (_AgentGone, EOFError, BrokenPipeError, ConnectionResetError):
            agent_gone = True
        else:
            agent_gone = False
        finally:
            # From here on no handler raises: _stop_all reaps by polling, and a SIGCHLD's
            # _ChildExited would cut it short (and leave its commands and the directory)
            self.in_poll = False
            signal.signal(signal.SIGHUP, _noop)
            signal.signal(signal.SIGCHLD, _noop)
            self._stop_all()
        if agent_gone and self.agent_dir:
            # The agent is gone or closing: its workers' socket directory goes too, which a
            # kill -9 of the agent would leave behind in /tmp (a batch system's end of a job
            # step, every time). Not when the helper itself failed: the agent still uses it.
            import shutil

            shutil.rmtree(self.agent_dir, ignore_errors=True)
        return 0

    def _hangup(self, *_: object) -> None:
        """SIGHUP's handler (the parent-death signal): the agent is gone. Like SIGCHLD's, it
        raises only in ``poll`` (in_poll cleared first, so a SIGCHLD while this unwinds
        raises nothing) and else leaves a flag the loop reads: raised anywhere, it could
        come while ``main`` stops after the socket's end-of-file, which the agent's death
        also brings, and end the helper before it stopped its commands."""
        self.hup = True
        if self.in_poll:
            self.in_poll = False
            raise _AgentGone

    def _child_exited(self, *_: object) -> None:
        """SIGCHLD's handler: note it; in ``poll`` (or about to be), leave it at once."""
        self.child_flag = True
        if self.in_poll:
            self.in_poll = False
            raise _ChildExited

    def _loop(self) -> None:
        # Per command this loop wakes about once (an exit's SIGCHLD), reaps, starts the next
        # command and maybe reports: on a 2-core node its own work is part of every short
        # command's cost (issue 13), so a turn reads the clock once and reaps only when a
        # SIGCHLD came. The signal reaches the loop without a wake-up pipe (a write in the
        # handler, a read and a second poll per exit): its handler sets child_flag, and
        # while in_poll is set it raises _ChildExited, which ends the poll (Python calls
        # handlers when a system call returns EINTR, and between bytecodes). in_poll is set
        # before child_flag is checked, and the handler clears it before raising, so a
        # signal is never missed and never raised outside the try below.
        poller = select.poll()
        sock_fd = self.sock.fileno()
        poller.register(sock_fd, select.POLLIN)
        poll = poller.poll
        monotonic = time.monotonic
        running = self.running
        queue = self.queue
        now = monotonic()
        trim_at = now + TRIM_S
        out_since = 0.0  # when the oldest report not sent yet was made
        while True:
            if self.out:
                due = out_since + REPORT_DELAY_S
                if running and trim_at < due:
                    due = trim_at
            elif running:
                due = trim_at
            else:
                due = 0.0
            wait_ms = None
            if due:
                wait_ms = math.ceil((due - now) * 1000)
                if wait_ms < 0:
                    wait_ms = 0
            events: list[tuple[int, int]] = []
            try:
                self.in_poll = True
                events = poll(0 if self.child_flag or self.hup else wait_ms)
                self.in_poll = False
            except _ChildExited:
                pass
            if self.hup:
                raise _AgentGone
            if events:
                while True:
                    msg = _recv(self.sock)
                    if msg is None:
                        break
                    self._handle(_decode(*msg))
            if self.child_flag:
                self.child_flag = False  # first: a SIGCHLD during _reap comes back next turn
                self._reap()
            if queue:
                self._launch()
            now = monotonic()
            if self.out:
                if not out_since:
                    out_since = now
                # Reports wait for company (one message for several exits, as the agent's
                # RESULTS do) while more is queued here than runs; when the queue runs low
                # they go at once, so the agent sends more.
                if (len(queue) <= len(running) or len(self.out) >= REPORT_BATCH
                        or now - out_since >= REPORT_DELAY_S or self.ack_now):
                    self.ack_now = False
                    out, self.out = self.out, []
                    out_since = 0.0
                    data, fds = _encode(out)
                    if fds:
                        socket.send_fds(self.sock, [data], fds)
                        os.close(fds[0])
                    else:
                        self.sock.send(data)
            if running and now >= trim_at:
                trim_at = now + TRIM_S
                launcher.trim_captures(running.values())

    def _handle(self, ops: list[tuple[Any, ...]]) -> None:
        for op in ops:
            kind = op[0]
            if kind == "run":
                self.queue.append(op)
            elif kind == "kill":
                self._kill(op[1], op[2], op[3])
            elif kind == "cap":
                self.cap = op[1]
                if op[2]:  # acknowledged at once: until then the agent counts this helper
                    # at the higher of its old and new cap (shoal.agent.commands)
                    self.out.append(("cap", op[2], self.used))
                    self.ack_now = True
            elif kind == "config":
                self.base_env = op[1]
                limits.max_output = op[2]

    def _kill(self, key: int, sig: int, why: str | None) -> None:
        run = self.by_key.get(key)
        if run is not None:
            if why:
                self.why[key] = why
            launcher.kill_group(run.pid, sig)
            return
        for op in self.queue:  # not started yet: it never will
            if op[1] == key:
                self.queue.remove(op)
                self.out.append((key, None, 0.0, 0.0, None, None, None))
                return

    def _launch(self) -> None:
        queue = self.queue
        running = self.running
        base_env = self.base_env
        while queue and self.used + queue[0][4] <= self.cap:
            _, key, tid, spec, cores, defaults, forced, cpus, argv, mpi = queue.popleft()
            try:
                run = launcher.spawn(tid, spec, cores, base_env, defaults=defaults,
                                     forced=forced, cpus=cpus, argv=argv)
            except launcher.LaunchError as exc:
                self.out.append((key, None, 0.0, 0.0, None, str(exc), None))
                continue
            except OSError as exc:
                self.out.append((key, None, 0.0, 0.0, None,
                                 f"cannot start the command: {exc.strerror or exc}", None))
                continue
            if mpi:
                run.mpi = mpi
            run.key = key
            self.used += cores
            running[run.pid] = run
            self.by_key[key] = run

    def _reap(self) -> None:
        """Collect every command that exited (SIGCHLD says some did)."""
        for run in launcher.reap_exited(self.running):
            self._exited(run)

    def _exited(self, run: launcher.Running) -> None:
        ended = time.monotonic()
        key = run.key
        del self.running[run.pid]
        del self.by_key[key]
        self.used -= run.cores
        if self.why and self.why.pop(key, None) is not None:
            launcher.release(run)
            self.out.append((key, run.status, run.started, ended, None, None, None))
            return
        status, payload, info = launcher.outcome(run, ended)
        self.out.append((key, run.status, run.started, ended, status, payload, info))

    def _stop_all(self) -> None:
        """The agent is gone or closing: stop every command and reap it."""
        self.queue.clear()
        grace_end = 0.0
        for run in self.running.values():
            if run.mpi:  # mpirun/srun stop their remote ranks on SIGTERM, not on SIGKILL
                launcher.kill_group(run.pid, signal.SIGTERM)
                grace_end = time.monotonic() + launcher.MPI_KILL_GRACE
            else:
                launcher.kill_group(run.pid, signal.SIGKILL)
        killed = grace_end == 0.0
        while self.running:
            if not killed and time.monotonic() >= grace_end:
                killed = True
                for run in self.running.values():
                    launcher.kill_group(run.pid, signal.SIGKILL)
            for run in list(self.running.values()):
                if (killed or _has_exited(run.pid)) and launcher.reap(run):
                    launcher.release(run)
                    del self.running[run.pid]
            if self.running:
                time.sleep(0.01)


def _has_exited(pid: int) -> bool:
    """True when ``pid`` (a child) has exited; it stays a zombie to reap."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == pid


def _noop(*_: object) -> None:
    """The handler of SIGINT, SIGTERM, SIGUSR1 and SIGQUIT in the helper (see main)."""
