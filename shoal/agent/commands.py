"""Command tasks on the agent: queue, hand to the spawn helper, report. A mixin of ``Agent``.

Commands start when cores are free, in order. A one-core command without options takes the
fast path here; one with resources (bound cores, GPUs, MPI ranks) goes through
``Placing._start_placed``, which hands it on through ``_hand`` and ``_track``.

The process work (spawn, reap, output, kill) happens in the spawn helper
(``shoal.agent.spawner``), so a spawn never blocks this loop; its reports arrive on one
descriptor in the agent's poller. This module keeps the agent's books: the cores commands
hold (from hand-off to report), the table of commands out at the helper, results to the
head. Short one-core commands (mean run time under ``QUEUE_AHEAD_S``) may be handed ahead
of free cores -- ``cmd_deep`` of them, what the head's window already queues here -- so
the helper starts the next the moment one exits, as ``xargs -P`` does; the helper never
runs more than ``cap`` cores of them (what the Python workers leave), and none are handed
ahead while a Python task waits for a core.

The window for short commands covers ``CMD_QUEUE_S`` of their work, so that results travel
in batches: the helper's reports wait for company up to ``spawner.REPORT_DELAY_S`` while
its queue is deep, the agent forwards each batch in one RESULTS, and the head refills the
window in one TASKS. On the 2-core VM of issue 13 every message costs its receiver a
wake-up (~20 us of CPU across CPUs, more than the Python work for it): with 5 ms of work
queued, W2's 2,000 commands took ~400 messages each way and ~1,500 wake-ups in each of
the client, the head and the agent; with 40 ms, a quarter of that and 0.2 s less CPU; and
with reports waiting up to 20 ms instead of 10, half as many again, the client, the head and
the agent spending a third less CPU on them (``bench/cpu_split.py --switches``). A deeper
window did not lower them further (80 ms: the same CPU within noise), and it holds more
commands at one agent that others could have run: a first command that ran in 2 ms puts
the next ones, however long, in the window.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import zmq

from shoal.agent import launcher, limits
from shoal.agent.failures import failure_info, text_info
from shoal.agent.pool import spec_attempt
from shoal.agent.spawner import Spawner
from shoal.transport import protocol as P

log = logging.getLogger("shoal.agent")

QUEUE_MAX = 1000  # the deepest window (as the agent's for Python tasks)
HELD_SCAN = 64  # commands waiting for GPUs that later ones may pass, per pass of dispatch
QUEUE_AHEAD_S = 0.005  # commands shorter than this (mean) may be handed ahead of free cores
AHEAD_MAX = 512        # at most this many
CMD_QUEUE_S = 0.04     # the window for such commands: this much of their work (module doc)
T_OPTS = P.T_OPTS


class Commands:
    """Mixin: the command side of ``Agent`` (module docstring)."""

    cmd_queue: deque[list[Any]]
    commands: dict[int, launcher.Running]
    spawner: Spawner | None
    cmd_cores: int
    cmd_mean: float
    cmd_deep: int
    slots: int
    tmpdir: str  # the agent's temporary directory: its helper removes it if the agent dies
    trace: bool
    base_env: dict[str, str]
    kill_grace: float

    if TYPE_CHECKING:  # provided by the agent and its other mixins (later in the MRO)
        placer: Any
        poller: zmq.Poller
        py_queue: deque[list[Any]]
        pinned: dict[int, deque[list[Any]]]
        gpu_py: deque[list[Any]]
        running: bool
        exit_code: int
        def _free_cores(self) -> int: ...
        def _result_to_head(self, item: list[Any], spec: list[Any] | None = None) -> None: ...
        def _start_placed(self, spec: list[Any], cores: int, free: int,
                          index: int) -> int | None: ...

    def _init_commands(self, mean_start: float) -> None:
        self.cmd_queue = deque()
        self.commands = {}          # key -> command out at the spawn helper
        self.spawner = None         # started by run(), before the workers and ZeroMQ
        self.cmd_keys = 0
        self.cmd_cap = -1           # cores the helper's commands may use, as last sent
        self.cmd_waiting_out = False  # the helper's socket was full: poll for room
        self.cmd_cores = 0
        self.cmd_mean = mean_start  # EWMA of command run time (start to exit)
        self.cmd_deep = 0                 # extra window for short commands (see _want_credit)

    def _command_window(self) -> int:
        """The agent's window beyond its slots for short commands: ``CMD_QUEUE_S`` of their
        work (0 while commands are not short)."""
        if self.cmd_mean >= QUEUE_AHEAD_S:
            return 0
        deep = min(QUEUE_MAX, int(self.slots * CMD_QUEUE_S / max(self.cmd_mean, 1e-5)))
        # the mean moves with every command; the window grows at once but shrinks only
        # when far too big, so it is not re-sent after every command
        if deep > self.cmd_deep or deep < self.cmd_deep // 4:
            self.cmd_deep = deep
        return self.cmd_deep

    def _start_spawner(self) -> int:
        """Fork the spawn helper (few descriptors open yet); the descriptor to poll."""
        self.spawner = Spawner(self.tmpdir)
        self.spawner.config(self.base_env, limits.max_output)
        return self.spawner.fileno()

    def _hand(self, tid: int, payload: dict[str, Any], cores: int, *,
              defaults: dict[str, str] | None = None,
              forced: dict[str, str | None] | None = None, cpus: list[int] | None = None,
              argv: list[str] | None = None, mpi: bool = False) -> launcher.Running:
        """Ask the helper to start a command; the agent's record of it."""
        self.cmd_keys += 1
        key = self.cmd_keys
        self.spawner.run(key, tid, payload, cores, defaults=defaults, forced=forced, cpus=cpus,
                         argv=argv, mpi=mpi)
        run = launcher.Running(tid, 0, -1, payload, cores, time.monotonic())
        run.helper = self.spawner
        run.key = key
        return run

    def _track(self, run: launcher.Running, spec: list[Any], cores: int,
               launched: float) -> None:
        """A command just handed to the helper: count its cores until it is reported."""
        run.attempt = spec_attempt(spec)
        run.launched = launched
        self.cmd_cores += cores
        self.commands[run.key] = run

    def _dispatch_commands(self) -> None:
        # In order (free cores counted once per pass). One waiting for GPU devices held by
        # others lets the ones behind it pass (at most HELD_SCAN of them per pass).
        free = self._free_cores()
        cap = free + self.cmd_cores  # what the Python workers leave
        if cap != self.cmd_cap:
            self.cmd_cap = cap
            self.spawner.cap(cap)
        queue = self.cmd_queue
        if not queue:
            return
        ahead = 0  # short one-core commands the helper may hold beyond the free cores
        if (self.cmd_mean < QUEUE_AHEAD_S and not self.py_queue and not self.pinned
                and not self.gpu_py):
            ahead = min(self.cmd_deep, AHEAD_MAX)
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
            if cores > free + ahead:
                break
            if skip:
                del queue[skip]
            else:
                queue.popleft()
            launched = time.monotonic() if self.trace else 0.0
            free -= cores
            self._track(self._hand(spec[0], spec[3], cores), spec, cores, launched)

    def _command_events(self) -> None:
        """The helper's reports (and room on its socket again)."""
        try:
            reports = self.spawner.receive()
        except EOFError:
            log.error("the spawn helper (pid %d) is gone: stopping", self.spawner.pid)
            self.running = False
            self.exit_code = 1
            return
        for rep in reports:
            self._done(rep)
        if self.cmd_waiting_out:
            self._flush_commands()

    def _flush_commands(self) -> None:
        """End of a turn: what this turn asked of the helper goes in one message."""
        sp = self.spawner
        if sp is None:
            return
        full = not sp.flush()
        if full != self.cmd_waiting_out:
            self.cmd_waiting_out = full
            self.poller.register(sp.fileno(), zmq.POLLIN | (zmq.POLLOUT if full else 0))

    def _done(self, rep: tuple[Any, ...]) -> None:
        key, rc, started, ended, status, payload, info = rep
        run = self.commands.pop(key, None)
        if run is None:
            return
        self.cmd_cores -= run.cores
        if run.cpus or run.gpus:
            self.placer.give_back(run.cpus, run.gpus)
        run.status = rc
        if rc is None:  # it did not start: dropped while queued there, or a launch error
            if isinstance(payload, str) and run.stopping != "drop":
                self._result_to_head([run.tid, P.ERR, payload.encode(), run.attempt,
                                      failure_info(launcher.LaunchError(payload))])
            return
        if run.stopping == "timeout":
            text = launcher.timeout_text(run, self.kill_grace)
            self._result_to_head([run.tid, P.TIMEOUT, text.encode(), run.attempt,
                                  text_info(text), *self._command_times(run, started, ended)])
            return
        if run.stopping == "drop" or status is None:  # cancelled, evicted or handed back
            return
        self.cmd_mean = 0.8 * self.cmd_mean + 0.2 * (ended - started)
        self._result_to_head([run.tid, status, payload, run.attempt, info,
                              *self._command_times(run, started, ended)])

    def _command_times(self, run: launcher.Running, started: float,
                       ended: float) -> list[list[Any]]:
        """Traced: the RESULT's 6th field for a command that exited (else nothing)."""
        if not self.trace:
            return []
        # the helper's times are monotonic, as are all the agent's (shoal.trace.columns)
        return [[run.launched or None, started, ended, run.cpus, run.gpus, None]]

    def _command_chores(self, now: float) -> None:
        """About once a second: MPI launchers past their grace (the helper trims output)."""
        launcher.kill_overdue(self.commands.values(), now)

    def _kill_commands(self) -> None:
        """Shutting down: the helper stops every command when its socket closes (an MPI
        launcher gets SIGTERM and a grace first); ``_reap_commands`` waits for it."""
        if self.spawner is not None:
            self.spawner.close(None)

    def _reap_commands(self) -> None:
        """Shutting down: wait for the helper to have reaped every command."""
        if self.spawner is not None:
            self.spawner.close(launcher.MPI_KILL_GRACE + 2.0)
        self.commands.clear()
