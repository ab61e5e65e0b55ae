"""Command tasks on the agent: queue, launch, reap, report. A mixin of ``Agent``.

Commands start when cores are free, in order. A one-core command without options takes the
fast path here; one with resources (bound cores, GPUs, MPI ranks) goes through
``Placing._start_placed``, which hands the running command back through ``_track``.

Running commands' pidfds live in one epoll set, itself one descriptor in the agent's poller:
a zmq poll costs O(registered items), and 400 running commands would make every turn of the
loop pay for all of them. ``shoal.agent.launcher`` does the process work (spawn, reap,
outcome, kill); this module keeps the agent's books (cores in use, the running table,
results to the head).
"""

from __future__ import annotations

import os
import select
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from shoal.agent import launcher
from shoal.agent.failures import failure_info, text_info
from shoal.agent.pool import spec_attempt
from shoal.transport import protocol as P

HELD_SCAN = 64  # commands waiting for GPUs that later ones may pass, per pass of dispatch
T_OPTS = P.T_OPTS


class Commands:
    """Mixin: the command side of ``Agent`` (module docstring)."""

    cmd_queue: deque[list[Any]]
    commands: dict[int, launcher.Running]
    cmd_epoll: select.epoll
    cmd_cores: int
    cmd_mean: float
    cmd_deep: int
    trace: bool
    base_env: dict[str, str]
    kill_grace: float

    if TYPE_CHECKING:  # provided by the agent and its other mixins (later in the MRO)
        placer: Any
        def _free_cores(self) -> int: ...
        def _result_to_head(self, item: list[Any]) -> None: ...
        def _start_placed(self, spec: list[Any], cores: int, free: int,
                          index: int) -> int | None: ...

    def _init_commands(self, mean_start: float) -> None:
        self.cmd_queue = deque()
        self.commands = {}            # pidfd -> running
        self.cmd_epoll = select.epoll()
        self.cmd_cores = 0
        self.cmd_mean = mean_start  # EWMA of command run time (launch to exit)
        self.cmd_deep = 0                 # extra window for short commands (see _want_credit)

    def _track(self, run: launcher.Running, spec: list[Any], cores: int,
               launched: float) -> None:
        """A command just spawned: count its cores and watch its pidfd."""
        run.attempt = spec_attempt(spec)
        run.launched = launched
        self.cmd_cores += cores
        self.commands[run.pidfd] = run
        self.cmd_epoll.register(run.pidfd, select.EPOLLIN)

    def _dispatch_commands(self) -> None:
        # In order (free cores counted once per pass). One waiting for GPU devices held by
        # others lets the ones behind it pass (at most HELD_SCAN of them per pass).
        free = self._free_cores()
        queue = self.cmd_queue
        skip = 0
        while skip < len(queue):
            spec = queue[skip]
            cores = spec[5] or 1
            if cores > 1 or len(spec) > T_OPTS and spec[T_OPTS]:
                # the slow path: resources to place (cores to bind, GPUs, MPI ranks)
                used = self._start_placed(spec, cores, free, skip)
                if used is None:  # waits for GPU devices
                    skip += 1
                    if skip >= HELD_SCAN:
                        break
                    continue
                if used < 0:
                    break      # not enough free cores: wait, in order
                free -= used
                continue
            if cores > free:
                break
            if skip:
                del queue[skip]
            else:
                queue.popleft()
            launched = time.time() if self.trace else 0.0
            try:
                run = launcher.spawn(spec[0], spec[3], cores, self.base_env)
            except launcher.LaunchError as exc:
                self._result_to_head([spec[0], P.ERR, str(exc).encode(), spec_attempt(spec),
                                      failure_info(exc)])
                continue
            free -= cores
            self._track(run, spec, cores, launched)

    def _command_events(self) -> None:
        for fd, _ in self.cmd_epoll.poll(0):
            run = self.commands.get(fd)
            if run is not None and run.status is None and launcher.reap(run):
                self._done(run)

    def _done(self, run: launcher.Running) -> None:
        self.cmd_epoll.unregister(run.pidfd)
        self.commands.pop(run.pidfd, None)
        os.close(run.pidfd)
        self.cmd_cores -= run.cores
        if run.cpus or run.gpus:
            self.placer.give_back(run.cpus, run.gpus)
        if run.stopping == "drop":  # cancelled, evicted or handed back: no result
            launcher.release(run)
            return
        if run.stopping == "timeout":
            launcher.release(run)
            text = launcher.timeout_text(run, self.kill_grace)
            self._result_to_head([run.tid, P.TIMEOUT, text.encode(), run.attempt,
                                  text_info(text), *self._command_times(run)])
            return
        dt = time.monotonic() - run.started
        self.cmd_mean = 0.8 * self.cmd_mean + 0.2 * dt
        status, payload, info = launcher.outcome(run)
        self._result_to_head([run.tid, status, payload, run.attempt, info,
                              *self._command_times(run)])

    def _command_times(self, run: launcher.Running) -> list[list[Any]]:
        """Traced: the RESULT's 6th field for a command that exited (else nothing)."""
        if not self.trace:
            return []
        now = time.time()
        return [[run.launched or None, now - (time.monotonic() - run.started), now, run.cpus,
                 run.gpus, None]]

    def _command_chores(self, now: float) -> None:
        """About once a second: output over --max-output, MPI launchers past their grace."""
        launcher.trim_captures(self.commands.values())
        launcher.kill_overdue(self.commands.values(), now)

    def _kill_commands(self) -> None:
        """Shutting down: signal every running command (``_reap_commands`` waits)."""
        for run in list(self.commands.values()):
            launcher.kill(run)

    def _reap_commands(self) -> None:
        """Shutting down: wait for the commands, kill what they left, close the epoll set."""
        for run in list(self.commands.values()):
            while run.kill_at > 0 and time.monotonic() < run.kill_at:  # an MPI launcher:
                try:                                                    # SIGTERMed, may stop
                    if os.waitpid(run.pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    break
                time.sleep(0.02)
            else:
                if run.kill_at > 0:
                    launcher.kill(run)  # its grace is over: SIGKILL
            try:
                os.waitpid(run.pid, 0)
            except ChildProcessError:
                pass
            launcher.kill(run)  # what it left in its process group
            launcher.release(run)
            os.close(run.pidfd)
        self.commands.clear()
        self.cmd_epoll.close()
