"""The embedded local default: a head and one agent on this machine, owned by this process.

Both start at once (the agent connects to an ipc endpoint the head will bind, ZeroMQ
retries until it is there), each in its own session so a Ctrl-C reaches only the
caller, which then stops them in order. They watch this process: if it dies, so do they
(parent-death signal plus an owner-pid check), so a crash leaves no orphan processes.
"""

from __future__ import annotations

import json
import os
import shutil
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
        self.head = subprocess.Popen(
            [py, "-m", "shoal.head", "--connection", self.connfile, "--owner-pid", me,
             "--prefetch", str(prefetch), "--exit-when-idle", "--quiet", "--remove-dir", *policy],
            **common,
        )
        # The agent reads the connection from a pipe, not the file: the head removes the
        # file's directory when it exits, which an executor shut down at once can make
        # happen before the agent has even started reading.
        agent_common = {**common, "stdin": subprocess.PIPE, "env": agent_env, "cwd": agent_cwd}
        self.agent = subprocess.Popen(
            [py, "-m", "shoal.agent", "--connection", "/dev/stdin", "--owner-pid", me,
             "--slots", str(slots), "--workers", str(self.workers), "--sys-path", path,
             "--quiet", *resources],
            **agent_common,
        )
        with open(self.connfile, "rb") as fh, self.agent.stdin as pipe:  # type: ignore[union-attr]
            pipe.write(fh.read())
        self._stopped = False
        self._pidfds: dict[int, subprocess.Popen[bytes]] = {}
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
        from shoal.task.errors import ExecutorError, HeadLost

        rc = self.head.poll()
        if rc is not None:
            return HeadLost(f"lost the head at {self.connection.address}: "
                            f"its process exited with {_status(rc)}")
        rc = self.agent.poll()
        if rc == EXIT_HEAD_LOST:
            return HeadLost(f"lost the head at {self.connection.address}: silent past the "
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
            os.killpg(self.agent.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.agent.poll()

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
        for fd in self._pidfds:
            os.close(fd)
        self._pidfds = {}
        shutil.rmtree(self.rundir, ignore_errors=True)


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
