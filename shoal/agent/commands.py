"""Command tasks on the agent: queue, hand to the spawn helper, report. A mixin of ``Agent``.

Commands start when cores are free, in order. A one-core command without options takes the
fast path here; one with resources (bound cores, GPUs, MPI ranks) goes through
``Placing._start_placed``, which hands it on through ``_hand`` and ``_track``.

The process work (spawn, reap, output, kill) happens in the spawn helper
(``shoal.agent.spawner``), so a spawn never blocks this loop; each helper's reports arrive
on its descriptor in the agent's poller. This module keeps the agent's books: the cores
commands hold (from hand-off to report), the table of commands out at the helper, results
to the head. Short one-core commands (mean run time under ``QUEUE_AHEAD_S``) may be handed
ahead of free cores -- ``cmd_deep`` of them, what the head's window already queues here --
so the helper starts the next the moment one exits, as ``xargs -P`` does; the helper never
runs more than ``cap`` cores of them (what the Python workers leave), and none are handed
ahead while a Python task waits for a core.

The window for short commands covers ``CMD_QUEUE_S`` of their work, so that results travel
in batches: the helper's reports wait for company up to ``spawner.REPORT_DELAY_S`` while
its queue is deep, the agent forwards each batch in one RESULTS, and the head refills the
window in one TASKS. On the 2-core VM of issue 13 every message costs its receiver a wake-
up (~20 us of CPU across CPUs, more than the Python work for it): with 5 ms of work
queued, W2's 2,000 commands took ~400 messages each way and ~1,500 wake-ups in each of the
client, the head and the agent; with 40 ms, a quarter of that and 0.2 s less CPU; and with
reports waiting up to 20 ms instead of 10, half as many again, the client, the head and
the agent spending a third less CPU on them (``bench/cpu_split.py --switches``). A deeper
window did not lower them further (80 ms: the same CPU within noise), and it holds more
commands at one agent that others could have run: a first command that ran in 2 ms puts
the next ones, however long, in the window.

An agent with several cores and no Python workers runs several spawn helpers
(``helper_count``: one per CPU it may use, at most its slots and ``HELPERS_MAX``). One
helper starts commands one after the other, each spawn blocking it until the child has
exec'd: where short commands end together (two slots on two cores: they start together and
take as long) a core sat idle ~150 us a round while the helper started the other's next
command. A one-core command without options goes to the helper with the most room under
its cap; every other (bound cores, GPUs, MPI ranks) to the first, which keeps them in
order. The helpers' caps share what the Python workers leave (``_caps``): a cap is raised
only by cores no other helper may be using -- each counts at the highest cap it may not
have taken yet (a helper acknowledges each), plus what it held above its cap then, and
never above its own commands -- so the cores in use never exceed that total while they
move between helpers.
"""

from __future__ import annotations

import logging
import os
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
HELPERS_MAX = 8        # spawn helpers per agent at most (one starts ~3,000 commands a second)
T_OPTS = P.T_OPTS


def helper_count(slots: int, workers: int = 0) -> int:
    """How many spawn helpers an agent of ``slots`` runs (module doc): one per CPU it may
    run on, at most ``slots`` and ``HELPERS_MAX``, when it has no Python ``workers`` (it
    runs commands only: `shoal run`, ``shoal agent --workers 0``); else one, since each
    helper's fork is on the cold start's path before the workers' (+2.5 ms of W5's ~105);
    ``SHOAL_SPAWN_HELPERS=N`` sets it."""
    given = os.environ.get("SHOAL_SPAWN_HELPERS")
    if given:
        try:
            return max(1, int(given))
        except ValueError:
            log.warning("SHOAL_SPAWN_HELPERS=%r is not a number: ignored", given)
    if workers:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(slots, cpus, HELPERS_MAX))


class Commands:
    """Mixin: the command side of ``Agent`` (module docstring)."""

    cmd_queue: deque[list[Any]]
    commands: dict[int, launcher.Running]
    spawners: list[Spawner]
    cmd_cores: int
    cmd_mean: float
    cmd_deep: int
    slots: int
    nworkers: int
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
        self.commands = {}          # key -> command out at a spawn helper
        self.spawners = []          # started by run(), before the workers and ZeroMQ
        self.by_cmd_fd: dict[int, Spawner] = {}
        self.cmd_keys = 0
        # per helper (see _caps): cores of the commands out there, its cap as last sent,
        # the highest cap it may still be using (until it acknowledges the last one), the
        # cores it held above its cap when it did, and the last cap's number
        self.cmd_load: list[int] = []
        self.cmd_cap: list[int] = []
        self.cmd_high: list[int] = []
        self.cmd_over: list[int] = []
        self.cmd_seq: list[int] = []
        self.cmd_placed: dict[int, int] = {}  # key -> cores: commands with resources
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

    def _start_spawners(self) -> list[int]:
        """Fork the spawn helpers (few descriptors open yet); the descriptors to poll."""
        n = helper_count(self.slots, self.nworkers)
        for index in range(n):
            sp = Spawner(self.tmpdir)
            sp.index = index
            sp.config(self.base_env, limits.max_output)
            self.spawners.append(sp)
            self.by_cmd_fd[sp.fileno()] = sp
        self.cmd_load = [0] * n
        self.cmd_cap = [0] * n   # no command before the first cap is sent
        self.cmd_high = [0] * n
        self.cmd_over = [0] * n
        self.cmd_seq = [0] * n
        return list(self.by_cmd_fd)

    def _hand(self, tid: int, payload: dict[str, Any], cores: int, *,
              defaults: dict[str, str] | None = None,
              forced: dict[str, str | None] | None = None, cpus: list[int] | None = None,
              argv: list[str] | None = None, mpi: bool = False,
              helper: int | None = None) -> launcher.Running:
        """Ask a helper to start a command; the agent's record of it. ``helper``: which
        (a one-core command without options); None: one with resources, which the first
        helper takes, in order, under a cap raised for it (``_caps``)."""
        self.cmd_keys += 1
        key = self.cmd_keys
        if helper is None:
            helper = 0
            self.cmd_placed[key] = cores
        sp = self.spawners[helper]
        sp.run(key, tid, payload, cores, defaults=defaults, forced=forced, cpus=cpus,
               argv=argv, mpi=mpi)
        self.cmd_load[helper] += cores
        run = launcher.Running(tid, 0, -1, payload, cores, time.monotonic())
        run.helper = sp
        run.key = key
        return run

    def _roomiest(self) -> int:
        """The helper with the most room under its cap (the first of equals)."""
        cap, load = self.cmd_cap, self.cmd_load
        best, room = 0, cap[0] - load[0]
        for i in range(1, len(cap)):
            r = cap[i] - load[i]
            if r > room:
                best, room = i, r
        return best

    def _bound(self, i: int) -> int:
        """The most cores helper ``i``'s commands may be holding now."""
        return min(self.cmd_load[i], self.cmd_high[i] + self.cmd_over[i])

    def _caps(self, total: int) -> None:
        """Move the helpers' caps toward their shares of ``total`` (what the Python workers
        leave: the commands with resources out at the first helper, then the rest evenly)
        and send the changed ones. Lowering a cap is safe at once; a cap is raised only as
        far as the others' ``_bound`` leaves room under ``total``."""
        n = len(self.spawners)
        cap, high = self.cmd_cap, self.cmd_high
        if n == 1:  # one helper: its cap is the total (every turn: keep this cheap)
            if total != cap[0]:
                self._send_cap(0, total)
            return
        placed = sum(self.cmd_placed.values())
        plain = max(0, total - placed)
        target = [plain // n + (1 if i < plain % n else 0) for i in range(n)]
        target[0] += min(placed, total)
        for i in range(n):
            if target[i] < cap[i]:
                self._send_cap(i, target[i])
        for i in range(n):
            if target[i] > cap[i]:
                room = total - self.cmd_over[i] - sum(self._bound(j) for j in range(n) if j != i)
                new = min(target[i], room)
                if new > cap[i]:
                    self._send_cap(i, new)
                    high[i] = max(high[i], new)

    def _send_cap(self, i: int, cores: int) -> None:
        self.cmd_cap[i] = cores
        # one helper: no other to count, no acknowledgement
        self.cmd_seq[i] = self.spawners[i].cap(cores, ack=len(self.spawners) > 1)

    def _cap_taken(self, i: int, seq: int, used: int) -> None:
        """Helper ``i`` took cap number ``seq`` holding ``used`` cores."""
        if seq == self.cmd_seq[i]:  # the last one sent: no higher one pending
            self.cmd_high[i] = self.cmd_cap[i]
            self.cmd_over[i] = max(0, used - self.cmd_cap[i])

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
        total = free + self.cmd_cores  # what the Python workers leave (hand-offs keep it)
        if self.cmd_queue:
            self._hand_out(free)
        self._caps(total)  # after the hand-offs: with room for commands with resources

    def _hand_out(self, free: int) -> None:
        queue = self.cmd_queue
        several = len(self.spawners) > 1
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
            helper = self._roomiest() if several else 0
            self._track(self._hand(spec[0], spec[3], cores, helper=helper), spec, cores,
                        launched)

    def _command_events(self, sp: Spawner) -> None:
        """A helper's reports (and room on its socket again)."""
        try:
            reports = sp.receive()
        except EOFError:
            log.error("the spawn helper (pid %d) is gone: stopping", sp.pid)
            self.running = False
            self.exit_code = 1
            return
        for rep in reports:
            if rep[0] == "cap":
                self._cap_taken(sp.index, rep[1], rep[2])
            else:
                self._done(rep)
        if sp.waiting_out:
            self._flush_commands()

    def _flush_commands(self) -> None:
        """End of a turn: what this turn asked of each helper goes in one message."""
        for sp in self.spawners:
            full = not sp.flush()
            if full != sp.waiting_out:
                sp.waiting_out = full
                self.poller.register(sp.fileno(), zmq.POLLIN | (zmq.POLLOUT if full else 0))

    def _done(self, rep: tuple[Any, ...]) -> None:
        key, rc, started, ended, status, payload, info = rep
        run = self.commands.pop(key, None)
        if run is None:
            return
        self.cmd_cores -= run.cores
        i = run.helper.index
        self.cmd_load[i] -= run.cores
        self.cmd_over[i] = max(0, self.cmd_over[i] - run.cores)
        self.cmd_placed.pop(key, None)
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
        """Shutting down: a helper stops every command when its socket closes (an MPI
        launcher gets SIGTERM and a grace first); ``_reap_commands`` waits for them."""
        for sp in self.spawners:
            sp.close(None)

    def _reap_commands(self) -> None:
        """Shutting down: wait for the helpers to have reaped every command. All are told
        at once (``_kill_commands``, again here if it was not), so they stop theirs side
        by side within one grace."""
        self._kill_commands()
        deadline = time.monotonic() + launcher.MPI_KILL_GRACE + 2.0
        for sp in self.spawners:
            sp.close(max(0.0, deadline - time.monotonic()))
        self.commands.clear()
