"""The embedded local default: a head and one agent on this machine, owned by this process.

Both start at once (the agent connects to an ipc endpoint the head will bind, ZeroMQ
retries until it is there), each in its own session so a Ctrl-C reaches only the
caller, which then stops them in order. They watch this process: if it dies, so do they
(parent-death signal plus an owner-pid check), so a crash leaves no orphan processes.

On Linux both are forked by one starter process (shoal.launch.boot) that imports what
they share once, which halves the CPU of a cold start; when the agent needs an
environment of its own (a prolog, ``pythonpath``, ``workdir``: shoal.launch.workenv) it
is started by itself, as the head is then.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from shoal.transport.connfile import Connection

if TYPE_CHECKING:
    from shoal.launch.workenv import WorkerEnv

EXIT_HEAD_LOST = 3  # the agent's exit status when it lost its head (shoal.agent.headlink)
AGENT_GRACE_S = 0.2  # how long stop() lets the agent exit on its own once the head is gone


class LocalCluster:
    """Head + agent subprocesses of one Executor.

    ``heartbeat_timeout``, ``crash_limit`` and ``journal`` become the head's
    ``--heartbeat-timeout``, ``--crash-limit`` and ``--journal`` (only when given);
    ``gpus`` and ``memory`` (bytes) the agent's ``--gpus`` and ``--memory`` (only when
    given: otherwise the agent detects its GPUs and does not count memory);
    ``worker_env`` the agent's prolog, extra import path and directory
    (shoal.launch.workenv): the prolog runs here, before anything starts, so a failing
    one is a one-line PrologError.
    """

    def __init__(self, workers: int | None = None, slots: int | None = None, prefetch: int = 1,
                 *, heartbeat_timeout: float | None = None, crash_limit: int | None = None,
                 journal: str | None = None, gpus: int | None = None,
                 memory: int | None = None, trace: str | None = None,
                 worker_env: WorkerEnv | None = None) -> None:
        agent_env, agent_cwd = None, None
        if worker_env is not None:
            worker_env.check_local()
            agent_env = worker_env.environment(os.environ, "this machine")
            agent_cwd = worker_env.workdir
        ncpu = os.cpu_count() or 1
        if slots is None:
            slots = workers if workers else ncpu
        if workers is None:
            workers = slots
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.slots = slots
        self.workers = min(workers, slots)
        self.rundir = tempfile.mkdtemp(prefix="shoal-run-")  # mode 0700
        self.connection = Connection.new(f"ipc://{self.rundir}/head")
        self.connfile = os.path.join(self.rundir, "connection.json")
        self.connection.write(self.connfile)
        me = str(os.getpid())
        py = sys.executable
        # Workers must import what the caller imports: hand them its sys.path.
        path = [p for p in sys.path if p and os.path.isdir(p)] or [os.getcwd()]
        path = json.dumps(worker_env.sys_path(path) if worker_env is not None else path)
        common = dict(start_new_session=True, close_fds=True, stdin=subprocess.DEVNULL)
        policy = head_policy_args(heartbeat_timeout, crash_limit, journal, trace)
        resources: list[str] = []
        if gpus is not None:
            resources += ["--gpus", str(gpus)]
        if memory is not None:
            resources += ["--memory", str(memory)]
        head_args = ["--connection", self.connfile, "--owner-pid", me, "--prefetch",
                     str(prefetch), "--exit-when-idle", "--quiet", "--remove-dir", *policy]
        agent_args = ["--owner-pid", me, "--slots", str(slots), "--workers", str(self.workers),
                      "--sys-path", path, "--quiet", *resources]
        self._stopped = False
        self._pidfds: dict[int, object] = {}
        self._starter: _Starter | None = None
        if worker_env is None and hasattr(os, "fork") and hasattr(os, "pidfd_open"):
            # the starter reads the connection before it forks either: nothing to race
            # with the head's removal of the run directory
            self._starter = _Starter(py, head_args, ["--connection", self.connfile, *agent_args],
                                     self.connection)
            self.head, self.agent = self._starter.head, self._starter.agent
            self._pidfds[self._starter.fd] = self._starter
            return
        self.head = subprocess.Popen([py, "-m", "shoal.head", *head_args], **common)
        # The agent reads the connection from a pipe, not the file: the head removes the
        # file's directory when it exits, which an executor shut down at once can make
        # happen before the agent has even started reading.
        agent_common = {**common, "stdin": subprocess.PIPE, "env": agent_env, "cwd": agent_cwd}
        self.agent = subprocess.Popen(
            [py, "-m", "shoal.agent", "--connection", "/dev/stdin", *agent_args], **agent_common)
        with open(self.connfile, "rb") as fh, self.agent.stdin as pipe:  # type: ignore[union-attr]
            pipe.write(fh.read())
        for p in (self.head, self.agent):
            try:
                self._pidfds[os.pidfd_open(p.pid)] = p
            except (AttributeError, OSError):  # no pidfd here: dead() is polled instead
                pass

    def watch_fds(self) -> list[int]:
        """File descriptors that become readable when the head or the agent exits."""
        return list(self._pidfds)

    def dead(self) -> BaseException | None:
        """The error a client should fail with if the head or the agent exited, else None."""
        from shoal.task import errors  # errors.HeadLost: made on first use (a failure)
        from shoal.task.errors import ExecutorError

        if self._starter is not None:
            why = self._starter.lost()
            if why is not None:
                return ExecutorError(f"the local runtime stopped: {why}")
        rc = self.head.poll()
        if rc is not None:
            return errors.HeadLost(f"lost the head at {self.connection.address}: "
                            f"its process exited with {_status(rc)}")
        rc = self.agent.poll()
        if rc == EXIT_HEAD_LOST:
            return errors.HeadLost(f"lost the head at {self.connection.address}: silent past the "
                            "heartbeat timeout (its agent gave up on it)")
        if rc is not None:
            return ExecutorError(f"the local runtime stopped: agent exited with {_status(rc)}")
        return None

    def abort(self) -> None:
        """After the head was lost (exited, or silent: stopped, hung): kill it, and stop
        the agent and its workers now (no orderly exit)."""
        if self.head.poll() is None:
            self.head.kill()
            self.head.wait()
        if self.agent.poll() is None:
            # SIGINT: stop now, killing what runs (SIGTERM would start a drain that waits
            # for running tasks, whose results no head will ever take)
            self.agent.send_signal(signal.SIGINT)
            try:
                self.agent.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
        try:  # the agent leads its own process group: take its workers with it
            if self.agent.pid:
                os.killpg(self.agent.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.agent.poll()
        if self._starter is not None:
            self._starter.close()

    def alive(self) -> bool:
        return self.head.poll() is None and self.agent.poll() is None

    def why(self) -> str:
        parts = []
        for name, p in (("head", self.head), ("agent", self.agent)):
            rc = p.poll()
            if rc is not None:
                parts.append(f"{name} exited with status {rc}")
        return ", ".join(parts) or "unknown"

    def stop(self, timeout: float = 5.0) -> None:
        """Wait for an orderly exit (the client already asked the head to shut down)."""
        if self._stopped:
            return
        self._stopped = True
        deadline = time.monotonic() + timeout
        try:
            self.head.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.head.send_signal(signal.SIGTERM)
        # An agent that had joined heard SHUTDOWN from the head and is gone within tens of
        # ms; one still starting (an executor shut down right after it was made) never
        # hears it and would wait out the heartbeat timeout: stop it. SIGTERM is quiet
        # before its handlers are set; after, the first one drains (nothing to drain
        # here) and a second stops it at once, in order.
        for grace in (AGENT_GRACE_S, 0.2):
            try:
                self.agent.wait(min(grace, max(0.05, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                self.agent.send_signal(signal.SIGTERM)
        for p in (self.head, self.agent):
            try:
                p.wait(2.0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._starter is not None:
            self._starter.close()
        else:
            for fd in self._pidfds:
                os.close(fd)
        self._pidfds = {}
        import shutil

        shutil.rmtree(self.rundir, ignore_errors=True)


class _Starter:
    """The starter process (shoal.launch.boot) and what it reports on its status pipe:
    the head's and the agent's pids, then their exit statuses."""

    def __init__(self, py: str, head_args: list[str], agent_args: list[str],
                 connection: Connection | None = None) -> None:
        """``connection``: given, the starter may be forked from this process
        (shoal.launch.boot.fork_starter) rather than started as a new interpreter."""
        import threading

        from shoal.launch import boot

        self.proc: subprocess.Popen[bytes] | _Forked
        if connection is not None and boot.can_fork_here():
            pid, rfd = boot.fork_starter(head_args, agent_args, connection)
            self.proc = _Forked(pid)
        else:
            rfd, wfd = os.pipe()
            try:
                self.proc = subprocess.Popen(
                    [py, "-m", "shoal.launch.boot", "--status", str(wfd), *head_args, "--",
                     *agent_args],
                    stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True,
                    pass_fds=(wfd,))
            finally:
                os.close(wfd)
        os.set_blocking(rfd, False)
        self.fd = rfd
        self._buf = b""
        self._eof = False
        self._closed = False
        self.pids: dict[str, int] = {}
        self.status: dict[int, int] = {}  # pid -> returncode (as Popen's)
        self._lock = threading.Lock()
        self.head = _Child(self, "head")
        self.agent = _Child(self, "agent")

    def read(self) -> bool:
        """Take what the starter wrote; False once it closed the pipe (exited)."""
        with self._lock:
            while not self._eof and not self._closed:
                try:
                    data = os.read(self.fd, 4096)
                except BlockingIOError:
                    break
                if not data:
                    self._eof = True
                    break
                self._buf += data
            *lines, self._buf = self._buf.split(b"\n")
            for line in lines:
                word, *rest = line.split()
                if word == b"exit":
                    self.status[int(rest[0])] = os.waitstatus_to_exitcode(int(rest[1]))
                else:
                    self.pids[word.decode()] = int(rest[0])
            return not self._eof

    def wait_readable(self, timeout: float | None) -> None:
        import select

        if not self._eof and not self._closed:
            select.select([self.fd], [], [], timeout)
        else:  # nothing more will come: a child of a dead starter is polled
            time.sleep(0.01 if timeout is None else max(0.0, min(timeout, 0.01)))

    def lost(self) -> str | None:
        """Why the head and the agent cannot be watched any more, or None: the starter
        exited before both were forked, or was killed while they ran."""
        if self.read():
            return None
        if len(self.pids) == 2 and all(pid in self.status for pid in self.pids.values()):
            return None  # it exited after both, as it should
        try:  # it closed the pipe on its way out: its exit is a moment away
            rc = self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            return "its starter (python -m shoal.launch.boot) closed its status pipe"
        return f"its starter (python -m shoal.launch.boot) exited with {_status(rc)}"

    def close(self) -> None:
        """Reap the starter (it exits once the head and the agent have)."""
        if self._closed:
            return
        try:
            self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.read()
        with self._lock:
            self._closed = True
            os.close(self.fd)
        for child in (self.head, self.agent):
            child.close()


class _Forked:
    """A starter forked from this process: what ``_Starter`` uses of a Popen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import select

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("python -m shoal.launch.boot", timeout or 0.0)
            select.select([self._pidfd], [], [], left)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        if self.poll() is None:  # not reaped: the pid is still this child's
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class _Child:
    """The head or the agent, forked by the starter: what stop() and abort() use of a
    ``subprocess.Popen`` (pid, poll, wait, send_signal, kill), its exit status as the
    starter reported it; signals go through a pidfd, so never to a reused pid."""

    def __init__(self, starter: _Starter, role: str) -> None:
        self._starter = starter
        self.role = role
        self._pid = 0
        self._pidfd = -1
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        """Its pid, once the starter has forked it (0 if the starter exited first)."""
        while not self._learn() and self._starter.read():
            self._starter.wait_readable(1.0)
        return self._pid

    def _learn(self) -> int:
        if not self._pid:
            with self._starter._lock:  # the I/O thread and the caller's may both ask
                pid = self._starter.pids.get(self.role)
                if pid and not self._pid:
                    try:
                        self._pidfd = os.pidfd_open(pid)
                    except OSError:  # already exited and reaped: its status is on the pipe
                        pass
                    self._pid = pid
        return self._pid

    def poll(self) -> int | None:
        """Its exit status (as Popen's returncode) if it has exited, else None; never waits."""
        if self.returncode is None:
            s = self._starter
            alive = s.read()
            pid = self._learn()
            if pid in s.status:
                self.returncode = s.status[pid]
            elif not alive and (not pid or not self._running()):
                self.returncode = -signal.SIGKILL  # the starter died: its status is lost
        return self.returncode

    def _running(self) -> bool:
        import select

        if self._pidfd < 0:
            return False
        return not select.select([self._pidfd], [], [], 0)[0]

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rc = self.poll()
            if rc is not None:
                return rc
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"shoal {self.role}", timeout or 0.0)
            # the starter writes the status as soon as it has reaped it
            self._starter.wait_readable(left)

    def send_signal(self, sig: int) -> None:
        self.pid  # noqa: B018 - just started: wait until the starter says which it is
        if self.poll() is not None:
            return
        try:
            if self._pidfd >= 0:
                signal.pidfd_send_signal(self._pidfd, sig)
            elif self._pid:  # no pidfd (refused here): the starter has not reported it gone
                os.kill(self._pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


def head_policy_args(heartbeat_timeout: float | None, crash_limit: int | None,
                     journal: str | None, trace: str | None = None) -> list[str]:
    """The head's policy flags for what was given (nothing for the defaults); ``trace``:
    its ``--trace`` file (shoal.trace)."""
    args: list[str] = []
    if heartbeat_timeout is not None:
        args += ["--heartbeat-timeout", repr(float(heartbeat_timeout))]
    if crash_limit is not None:
        args += ["--crash-limit", str(crash_limit)]
    if journal is not None:
        args += ["--journal", os.path.abspath(journal)]
    if trace is not None:
        args += ["--trace", os.path.abspath(trace)]
    return args


def _status(rc: int) -> str:
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"status {rc}"
