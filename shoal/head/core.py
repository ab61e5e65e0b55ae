"""Scheduler core: pure logic, no I/O. Events in, decisions out.

The head's server feeds it events (tasks submitted, agent joined or left, window changed,
results in, cancellations) and performs the decisions it returns (send these tasks to
that agent, resolve those tasks at their owner). Nothing here touches a socket, a clock
or a process, so tests drive it directly and a simulator can drive it with thousands of
fake agents.

Schedules
- dynamic (default): a FIFO ready queue; each agent says how many cores' worth of
  unfinished tasks it wants (its window: slots x (1 + prefetch), more when its tasks are
  short or blocked on sub-tasks), and the core hands it the oldest ready tasks that fit.
  A burst goes first to free cores (most credit first), then to the prefetch; agents that
  may have credit sit on a heap, so a result refills its own agent in O(log agents).
- stated run times (``opts["estimate"]``, seconds): such tasks go longest first and, when
  long, only to free cores (:mod:`shoal.head.filling`). ``defer_fill``: the server places
  a turn's submissions together at its end (:meth:`fill`), not one SUBMIT at a time, and
  ends a turn once ``TURN_TASKS`` submitted tasks wait (``unfilled``), so a huge
  submission starts running while the rest of it is still being read.
- static: a batch is split up front into contiguous blocks, one per slot of the agents
  known at that moment (mpi4py-scatter style), and pushed whatever the credit.

Placement (optional 8th task field ``[agent, hard]``): a placed task waits in its
agent's own queue, which that agent drains before the shared one. A hard placement
runs only there (and is lost with that agent); a soft one (a preference, e.g. "where my
inputs are") is taken by another agent only when that agent would otherwise idle while
the preferred one is full.

Attempts (see transport.protocol): a task is run by attempts; each dispatch stamps the
attempt number and the owner's client number on the spec. A result counts only if it
comes from the agent holding the task's current attempt, with that number. A failed
attempt becomes a new one (retries with backoff, the crash limit for lost ones) or the
task's outcome, which then lists every failed attempt. An agent that is lost has its
attempts failed as LOST (requeued while under the crash limit); one that leaves in order
(drain, shutdown) has its tasks requeued without counting.

Resources (``shoal.head.placement``): tasks asking for GPUs, memory, MPI ranks/nodes,
exclusive agents or a time limit wait in per-shape queues and are placed oldest first with
the plain ones, with one reservation against starvation; impossible requests fail at once.
``paused`` holds every dispatch until :meth:`resume` (the head waiting for its agents).

Dependencies: a task waits in ``waiting`` until every task it depends on succeeded;
if one failed or was cancelled it is resolved DEPFAIL without running. The head keeps
live tasks only: a dependency that is no longer live and not in ``failed`` succeeded.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable
from math import log2 as _log2
from typing import Any

from shoal.head.filling import Filling
from shoal.head.need import (
    BACKOFF,
    DISPATCHED,
    DONE,
    EST_MIN_BUCKET,
    EST_PER_OCTAVE,
    EST_SHIFT,
    QUEUED,
    SIZE_MAX,
    SIZE_SHIFT,
    WAITING,
    est_bucket,
    parse_need,
)
from shoal.head.placement import Placement
from shoal.head.planning import Planning
from shoal.head.state import AgentState, Decisions, Task, _err, _plural_gpus
from shoal.transport.protocol import (
    CANCELLED,
    DEPFAIL,
    ERR,
    LOST,
    OK,
    T_ATTEMPT,
    T_CORES,
    T_DEPS,
    T_FID,
    T_HINT,
    T_ID,
    T_KIND,
    T_OPTS,
    T_OWNER,
    T_PAYLOAD,
    T_PLACE,
    TIMEOUT,
)

__all__ = ["SchedulerCore", "Decisions", "T_ID", "T_KIND", "T_FID", "T_PAYLOAD", "T_DEPS",
           "T_CORES", "T_HINT", "T_PLACE", "T_OPTS", "T_ATTEMPT", "T_OWNER"]

CRASH_LIMIT = 3
BACKOFF_BASE_S = 0.05      # first retry after an exception waits this long, doubling
BACKOFF_MAX_S = 5.0
# A server turn (and a simulated one) ends once this many submitted tasks wait to be placed:
# reading a million estimated tasks takes the core ~3 s, and 262,144 cores idle meanwhile
# (shoal sim million: 81.5% -> 94.4% with 50,000; 20,000 did 93.4%). Large enough that a
# turn's big tasks are still seen together before small ones take their cores.
TURN_TASKS = 50_000
# The head process's collector (``python -m shoal.head`` sets it, the simulator around a run):
# the head holds every live task (a million tasks are some 4 million objects) and makes few
# reference cycles, so Python's default (700, 10, 10) mostly costs: a young collection every
# 700 allocations, and a full one over the whole heap each time it grew by a quarter (a
# task's objects were traversed ~4 times on the way to a million). Here young collections
# come every 50,000 allocations and a full one is considered only every 100 million (cycles
# still die young in the first two generations). Submitting 250,000 tasks: 1.27 us a task
# with (10000, 10, 10), 0.78 us with these, 0.63 us with no collector at all; shoal sim
# million.toml --estimate 0: docs/benchmarks.md, "The head's margin".
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> tuple[int, int, int]:
    """Set the head process's collector thresholds (``GC_THRESHOLDS``); returns the previous
    ones, to restore."""
    old = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    return old  # type: ignore[return-value]


# what a time-out is, for retry_on (the agent sends no exception for it)
_TIMEOUT_TYPES = ("shoal.task.errors.TaskTimeout", "builtins.TimeoutError",
                  "builtins.OSError", "builtins.Exception")
_EXIT_TYPES = ("shoal.task.command.CommandError", "builtins.Exception")
_STATUS_WORD = {ERR: "raised", LOST: "lost", TIMEOUT: "timed out", OK: "exited non-zero"}


class SchedulerCore(Filling, Placement, Planning):
    """Task table + ready queue + per-agent credit. See module docstring and
    :mod:`shoal.head.placement` (resources, reservation, MPI).

    ``clock`` (epoch seconds) is read only to compare a task's time limit with an agent's
    ``end_time``."""

    def __init__(self, crash_limit: int = CRASH_LIMIT,
                 clock: Callable[[], float] = time.time, big_first: bool = False,
                 plan: bool = False) -> None:
        """``big_first``: the policy for mixes of large and small tasks (see
        :mod:`shoal.head.placement`): tasks with resources (GPUs, ...) go before older
        plain ones, larger first, and a task of several cores is sent only where its cores
        are free now, as every task is while such tasks wait (no prefetch then).
        ``plan``: tasks with estimates are laid out over the agents in time and dispatched
        by that plan (:mod:`shoal.head.planning`); ``clock`` is then its time."""
        self.big_first = big_first
        self._plan_init(plan)
        self.tasks: dict[int, Task] = {}
        self.ready: deque[Task] = deque()          # plain tasks (not tids: no lookup to pop one)
        self.agents: dict[bytes, AgentState] = {}
        self.failed: dict[int, int] = {}          # tid -> status, for dependency checks
        self.pending_static: list[Task] = []      # static tasks waiting for a first agent
        self.completed = 0
        self.placed = 0                            # ready tasks waiting in agents' own queues
        self.crash_limit = max(1, crash_limit)
        self.retried = 0                           # attempts that became a new attempt
        self.requeued = 0                          # tasks handed back or taken from a lost agent
        self.departed: dict[bytes, str] = {}       # agents that left or were lost -> why
        # placement (shoal.head.placement)
        self.clock = clock
        self.seq = 0                               # tasks seen: their age
        self.shaped: dict[tuple[Any, ...], deque[int]] = {}  # shape -> its ready tasks
        self.nshaped = 0                           # tasks in ``shaped``
        self.resv_tid: int | None = None           # the reservation's holder
        self.resv_agents: tuple[bytes, ...] = ()
        self.paused = False                        # hold every dispatch (see ``resume``)
        self._plain_max = 1                        # most cores a plain task asked for
        self._why_cache: dict[tuple[Any, ...], str | None] = {}
        self._live: list[AgentState] = []
        self._pass_free = 0
        self._pass_room = self._pass_gpus = 0
        self._holder_seen = False
        # Agents that may have credit, most first: a heap of (-credit, join order, name),
        # ``_open_at`` the credit of each agent's live entry (an entry whose agent's credit
        # changed since is stale, checked when it comes up); ``_dirty``: agents whose credit
        # may have grown since the last pass (pushed when a pass starts). A result refills
        # its own agent in O(log agents), not by sorting them all.
        self._open: list[tuple[int, int, bytes]] = []
        self._open_at: dict[bytes, int] = {}
        self._dirty: set[bytes] = set()
        self._joined = 0
        self._min_slots = 0                        # fewest cores of an agent (0: none yet)
        # tasks with estimates (shoal.head.filling: longest first): ``ready`` holds the
        # longest bucket (``_top``), the shorter ones wait in ``_lower`` (bucket -> tids)
        self._top: int | None = None
        self._lower: dict[int, deque[Task]] = {}
        self._lower_keys: list[int] = []           # heap of -bucket
        self._nlower = 0
        # ``defer_fill``: submit() only queues and fill() places, once per turn of the server
        # (every SUBMIT of a turn seen before any is placed: large tasks then go first);
        # ``unfilled``: how many tasks submit() queued since (the server ends its turn at
        # TURN_TASKS)
        self.defer_fill = False
        self.unfilled = 0

    # ---- agents -------------------------------------------------------------------
    def add_agent(self, name: bytes, slots: int, num: int = 0, *, gpus: int = 0, memory: int = 0,
                  node: str | None = None, end_time: float | None = None) -> Decisions:
        """An agent joined with ``slots`` cores, ``gpus``, ``memory`` bytes (0: not
        counted), its launchers' ``node`` name (default: its name) and the ``end_time``
        (epoch seconds) by which it must have left (None: unknown)."""
        self._joined += 1
        self.agents[name] = AgentState(name, slots, num, gpus, memory,
                                       node or name.decode(errors="replace"), end_time,
                                       order=self._joined)
        self._open_at.pop(name, None)
        self._min_slots = slots if not self._min_slots else min(self._min_slots, slots)
        self.departed.pop(name, None)
        self._why_cache.clear()
        self._plan_stale = self.planning
        d = Decisions()
        if self.paused:
            return d
        if self.pending_static:
            batch, self.pending_static = self.pending_static, []
            self._place_static(batch, d)
        self._fill_waiting(d)
        self._fail_impossible(d)
        return d

    def resume(self) -> Decisions:
        """Start dispatching (after ``paused``: the head waited for its agents)."""
        self.paused = False
        d = Decisions()
        if self.pending_static:
            batch, self.pending_static = self.pending_static, []
            self._place_static(batch, d)
        self._fill_all(d)
        self._fail_impossible(d)
        return d

    def queued(self) -> int:
        """Tasks ready and waiting for room (not counting placed ones)."""
        return len(self.ready) + self.nshaped + self._nlower + self._nplan

    def remove_agent(self, name: bytes, reason: str, lost: bool = True) -> Decisions:
        """The agent left (``lost=False``: its tasks go back to the queue, no attempt
        counts) or was lost (its attempts fail as LOST: retried under the crash limit)."""
        d = Decisions()
        agent = self.agents.pop(name, None)
        if agent is None:
            return d
        if len(self.departed) >= 10_000:  # bounded: agents come and go in a long run
            self.departed.clear()
        self.departed[name] = reason
        self._why_cache.clear()
        self._plan_stale = self.planning
        self._open_at.pop(name, None)
        self._min_slots = min((a.slots for a in self.agents.values()), default=0)
        if name in self.resv_agents:
            self._unreserve()
        label = name.decode(errors="replace")
        why = f"agent {label} was lost: {reason}" if lost else f"agent {label} left: {reason}"
        # MPI tasks led elsewhere with a share here: their attempt is lost with it
        shared = [self.tasks[t] for t in sorted(agent.holds) if t in self.tasks]
        for task in shared:
            if task.state == DISPATCHED and task.agent is not None:
                d.revoke.setdefault(task.agent, []).append(task.tid)
        for tid in sorted(agent.running, reverse=True) + [t.tid for t in shared]:
            task = self.tasks.get(tid)
            if task is None or task.state != DISPATCHED:
                continue
            if task.agent != name and tid not in agent.holds:
                continue
            if task.alloc is not None:
                self._release(task)
            task.state = QUEUED
            task.agent = None
            if lost:
                self._attempt_failed(task, LOST, why.encode(), None, label, agent.num, d)
            else:
                self.requeued += 1
                self._enqueue(task, d, front=True)
        agent.running.clear()
        agent.holds.clear()
        self.placed -= len(agent.own)
        for tid in agent.own:
            task = self.tasks.get(tid)
            if task is None:
                continue
            if task.hard:
                self._finish(task, LOST, _err(f"agent {label} it was placed on left: {reason}"), d)
            else:
                self._push(task)
        agent.own.clear()
        if not self.agents:
            return d
        self._fill_waiting(d)
        self._fail_impossible(d)
        return d

    def drain(self, name: bytes) -> Decisions:
        """The agent is leaving: it gets no more tasks (it hands back what it has not
        started with :meth:`returned`)."""
        d = Decisions()
        agent = self.agents.get(name)
        if agent is None:
            return d
        agent.draining = True
        agent.want = 0
        self._plan_stale = self.planning
        self._rewindow(agent)
        self._why_cache.clear()
        if name in self.resv_agents:
            self._unreserve()
        if agent.own:  # its placed queue goes to the others (hard placements are lost)
            own, agent.own = agent.own, deque()
            self.placed -= len(own)
            for tid in own:
                task = self.tasks.get(tid)
                if task is None:
                    continue
                if task.hard:
                    self._finish(task, LOST, _err(f"agent {name.decode(errors='replace')} it was "
                                                  "placed on is leaving"), d)
                else:
                    self._push(task)
            self._fill_all(d)
        elif self.planning and self._nplan:  # its planned tasks go to the others
            self._fill_all(d)
        self._fail_impossible(d)
        return d

    def returned(self, name: bytes, tids: list[int]) -> Decisions:
        """The agent handed these back unstarted: requeue them, no attempt counts."""
        d = Decisions()
        agent = self.agents.get(name)
        for tid in reversed(tids):
            task = self.tasks.get(tid)
            if task is None or task.agent != name or task.state != DISPATCHED:
                continue
            self._unrun(agent, task)
            task.state = QUEUED
            task.agent = None
            self.requeued += 1
            self._enqueue(task, d, front=True)
        self._fill_waiting(d)
        return d

    def _unrun(self, agent: AgentState | None, task: Task) -> None:
        """Take back what a dispatched task holds (it is no longer on its agent)."""
        if task.alloc is not None:
            self._release(task)
        elif agent is not None and task.tid in agent.running:
            agent.running.discard(task.tid)
            agent.inflight -= task.cores
            self._mark(agent)

    def requeue(self, tids: list[int]) -> Decisions:
        """The backoff of these retries is over: queue them again."""
        d = Decisions()
        for tid in tids:
            task = self.tasks.get(tid)
            if task is not None and task.state == BACKOFF:
                task.state = QUEUED
                self._enqueue(task, d)
        self._fill_waiting(d)
        return d

    def total_slots(self) -> int:
        return sum(a.slots for a in self.agents.values())

    def set_window(self, name: bytes, window: int) -> Decisions:
        """The agent wants ``window`` cores' worth of unfinished tasks (absolute, so a
        smaller window takes effect at once and no credit is ever lost or double-counted)."""
        d = Decisions()
        agent = self.agents.get(name)
        if agent is None or agent.draining:
            return d
        agent.want = window
        if agent.held or agent.rv_cores or agent.excl:
            self._rewindow(agent)
        else:
            agent.base = agent.window = window
            self._mark(agent)
        if self.planning:
            self._fill_all(d)
        else:
            self._fill(agent, d)
        return d

    def _fill_waiting(self, d: Decisions) -> None:
        """Fill the agents when any task waits: ready (plain, estimated), placed on an
        agent, shaped, or planned."""
        if self.ready or self.placed or self.nshaped or self._nplan:
            self._fill_all(d)

    # ---- tasks --------------------------------------------------------------------
    def submit(self, specs: list[list[Any]], owner: bytes, static: bool = False,
               owner_num: int | None = None, keys: list[str | None] | None = None) -> Decisions:
        """New tasks of ``owner`` (a client, or an agent for its workers' sub-tasks).
        ``owner_num``: the client number stamped on the specs (None: the specs carry it,
        as an agent stamps its workers' sub-tasks). ``keys``: the tasks' journal keys, one
        per spec (None: not journaled); a task that finishes OK lands in ``done_keys``."""
        d = Decisions()
        tasks = self.tasks
        fresh: list[Task] = []
        seq = self.seq
        plain_max = self._plain_max
        for i, spec in enumerate(specs):
            seq += 1
            task = Task(spec[T_ID], spec, owner, static, owner_num, seq)
            tasks[task.tid] = task
            if keys is not None:
                task.key = keys[i]
            opts = task.opts
            if opts or task.cores != 1:
                # a plain task stating its run time only (the common case with estimates):
                # _shape's steps for it, without its calls (est_bucket, parse_need)
                est = opts.get("estimate") if opts is not None and len(opts) == 1 else None
                cores = task.cores
                if (est.__class__ is float and 0.0 < est < 1.8e19 and cores.__class__ is int
                        and cores >= 1):
                    x = _log2(est) * EST_PER_OCTAVE
                    b = int(x)
                    if x < b:  # floor, below 1 s
                        b -= 1
                    if b < EST_MIN_BUCKET:
                        b = EST_MIN_BUCKET
                    task.est = b
                    task.seq -= (b - EST_MIN_BUCKET) << EST_SHIFT
                    if cores > plain_max:
                        plain_max = self._plain_max = cores
                elif not self._shape(task, d):
                    continue
            deps = spec[T_DEPS]
            if deps:
                bad = self._wire_deps(task, deps)
                if bad is not None:
                    self._finish(task, DEPFAIL, _err(f"dependency task {bad} failed or was cancelled"), d)
                    continue
                if task.ndeps:
                    task.state = WAITING
                    continue
            fresh.append(task)
        self.seq = seq
        if static:
            self._place_static([t for t in fresh if t.place is None and t.need is None], d)
            fresh = [t for t in fresh if t.place is not None or t.need is not None]
        ready, lower = self.ready, self._lower
        nlower = 0
        for task in fresh:
            if task.place is not None:
                self._enqueue_placed(task, d)
            elif task.need is None:
                b = task.est
                top = self._top
                if b is None or b == top:  # (_push_est's steps: its bucket is ready's,
                    ready.append(task)
                elif top is not None and b < top and b in lower:  # or a shorter one that waits)
                    lower[b].append(task)
                    nlower += 1
                else:
                    self._push_est(task)
            else:
                self._push_shaped(task)
        self._nlower += nlower
        if fresh:
            if self.defer_fill:
                self.unfilled += len(fresh)
            else:
                self._fill_all(d)
        return d

    def fill(self) -> Decisions:
        """Place what submit() queued with ``defer_fill`` (the end of the server's turn)."""
        d = Decisions()
        if self.unfilled:
            self.unfilled = 0
            if self.ready or self.placed or self.nshaped or self._lower:
                self._fill_all(d)
        return d

    def _shape(self, task: Task, d: Decisions) -> bool:
        """Read a task's resource request; False (and the task failed) when it is bad."""
        b = est_bucket(task.opts)
        if b is not None:  # longest first (LPT); under big_first length goes before size
            task.est = b
            task.seq -= (b - EST_MIN_BUCKET) << EST_SHIFT
        opts = task.opts
        need = parse_need(task.cores, None if b is not None and len(opts) == 1 else opts)  # type: ignore[arg-type]
        if isinstance(need, str):
            self._finish(task, ERR, _err(f"bad resource request: {need}"), d)
            return False
        if need is None:
            if task.cores > self._plain_max:
                self._plain_max = task.cores
            return True
        task.need = need
        if b is not None:  # one queue per shape and length: each queue's head is its longest
            need.key = (*need.key, b)
        if self.big_first:  # larger first, then oldest: the order of the pass (``seq``)
            task.seq -= min(SIZE_MAX, need.cores * max(1, need.ranks) + 64 * need.gpus) << SIZE_SHIFT
        if need.ranks and task.place is not None:
            if task.hard:
                self._finish(task, ERR, _err("an MPI task cannot be placed on "
                                             "one agent (its ranks go where the head finds room)"), d)
                return False
            task.place = None  # a soft preference: its ranks go where there is room
        return True

    def _push(self, task: Task, front: bool = False) -> None:
        """Queue a ready task that has no placement (or lost it)."""
        if task.need is not None:
            self._push_shaped(task, front)
        elif task.est is not None and not front:
            self._push_est(task)
        elif front:
            self.ready.appendleft(task)
        else:
            self.ready.append(task)

    def _enqueue_placed(self, task: Task, d: Decisions) -> None:
        agent = self.agents.get(task.place)  # type: ignore[arg-type]
        if agent is None or agent.draining:
            if not task.hard:
                self._push(task)
                return
            name = task.place.decode(errors="replace")  # type: ignore[union-attr]
            gone = self.departed.get(task.place)  # type: ignore[arg-type]
            if agent is not None:
                self._finish(task, LOST, _err(f"agent {name} it was placed on is leaving"), d)
            elif gone is not None:  # it was here: the task is lost with it, not misaddressed
                self._finish(task, LOST, _err(f"agent {name} it was placed on left: {gone}"), d)
            else:
                self._finish(task, ERR, _err(f"no agent named {name!r} is connected"), d)
            return
        if task.cores > agent.slots or (task.need is not None and not self._capable(agent, task.need)):
            if task.hard:
                label = agent.name.decode(errors="replace")
                self._finish(task, ERR, _err(
                    f"the task asks for {task.cores} cores but agent {label} has "
                    f"{agent.slots}" if task.cores > agent.slots else
                    f"the task asks for more than agent {label} has ({_plural_gpus(agent)})"), d)
            else:
                self._push(task)
            return
        agent.own.append(task.tid)
        self.placed += 1

    def _wire_deps(self, task: Task, deps: list[int]) -> int | None:
        for dep in deps:
            parent = self.tasks.get(dep)
            if parent is None:
                if dep in self.failed:
                    return dep
                continue  # finished successfully
            if parent.dependents is None:
                parent.dependents = []
            parent.dependents.append(task.tid)
            task.ndeps += 1
        return None

    def finished(self, agent_name: bytes, results: list[list[Any]]) -> Decisions:
        """Results from an agent: ``[tid, status, payload, attempt, info]`` each.

        Only the agent holding the task's current attempt is heard, and only for that
        attempt (``attempt`` None: the current one): a result of an attempt that was
        given up (its agent declared lost) is dropped, so a task resolves once.

        The hot path of a run whose results come one at a time: a plain task's success is
        resolved here (what :meth:`_finish` does for it), and the agent refilled at once
        when it is the only one whose credit may have grown (as :meth:`_fill_all` would).
        """
        d = Decisions()
        agent = self.agents.get(agent_name)
        num = agent.num if agent is not None else 0
        tasks = self.tasks
        resolve = d.resolve
        owner: bytes | None = None
        out: list[list[Any]] = []
        done = 0
        for item in results:
            task = tasks.get(item[0])
            if task is None or task.agent != agent_name or task.state != DISPATCHED:
                continue  # resolved, cancelled, requeued: a stale attempt
            n = len(item)
            attempt = item[3] if n > 3 else None
            if attempt is not None and attempt != task.attempt:
                continue
            if task.alloc is not None:
                self._release(task)
            elif agent is not None:
                running = agent.running
                if task.tid in running:
                    running.remove(task.tid)
                    agent.inflight -= task.cores
            status = item[1]
            info = item[4] if n > 4 else None
            if status == OK and (info is None or not task.opts):
                if task.dependents is None and task.key is None:  # _finish's steps for it
                    del tasks[task.tid]
                    task.state = DONE
                    done += 1
                    item[1] = OK
                    item[3] = num
                    if n > 4:
                        item[4] = task.history
                    else:
                        item.append(task.history)
                    if task.owner != owner:
                        owner = task.owner
                        out = resolve.get(owner)  # type: ignore[assignment]
                        if out is None:
                            out = resolve[owner] = []  # type: ignore[index]
                    out.append(item)
                else:
                    self._finish(task, OK, item[2], d, num, item)
            elif status in (ERR, LOST, TIMEOUT, OK):
                task.state = QUEUED
                task.agent = None
                self._attempt_failed(task, status, item[2], info,
                                     agent_name.decode(errors="replace"), num, d, item)
            else:
                self._finish(task, status, item[2], d, num, item)
        self.completed += done
        if agent is not None:
            if (self.ready and not self._dirty and not self._open and not agent.draining
                    and not (self.paused or self.planning or self.nshaped or self.placed)
                    and self.resv_tid is None):
                self._fill_one(agent, d)  # the steady state: only this agent may have credit
                return d
            self._dirty.add(agent_name)  # (_mark)
        self._fill_waiting(d)
        return d

    def _attempt_failed(self, task: Task, status: int, payload: bytes, info: dict[str, Any] | None,
                        where: str, num: int, d: Decisions, item: list[Any] | None = None) -> None:
        """An attempt failed (or a command exited non-zero): retry it or resolve the task.

        LOST attempts are retried while the task was lost fewer than ``crash_limit`` times
        in a row; the others while their count is within ``opts["retries"]`` and, for
        exceptions, the raised class matches ``opts["retry_on"]`` (when given)."""
        opts = task.opts or {}
        if status == OK:  # a command that exited non-zero (info["exit"]): a failure to retry
            if not opts.get("retries"):  # (not journaled: a resumed run runs it again)
                self._finish(task, OK, payload, d, num, item, journal=False)
                return
        why = info.get("why") if info else None
        if not why:
            why = payload.decode(errors="replace") if status in (LOST, TIMEOUT) else _STATUS_WORD.get(
                status, "failed")
        line = f"attempt {task.spec[T_ATTEMPT]} on {where}: {why}"
        if task.history is None:
            task.history = [line]
        else:
            task.history.append(line)
        delay = 0.0
        if status == LOST:
            task.crashes += 1
            retry = task.crashes < self.crash_limit
            if not retry:
                payload = _err(f"task lost {task.crashes} times in a row (crash limit "
                               f"{self.crash_limit}); last: {why}")
        else:
            task.crashes = 0
            task.failures += 1
            retry = task.failures <= (opts.get("retries") or 0)
            on = opts.get("retry_on")
            if retry and on:
                if status == ERR:
                    types = (info or {}).get("types") or ()
                elif status == TIMEOUT:
                    types = _TIMEOUT_TYPES
                else:
                    types = _EXIT_TYPES
                retry = any(t in on for t in types)
            delay = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (task.failures - 1))
        if not retry:
            self._finish(task, status, payload, d, num, item, journal=False)
            return
        self.retried += 1
        if delay > 0:
            task.state = BACKOFF
            d.later.append((delay, task.tid))
        else:
            self._enqueue(task, d, front=True)

    def _enqueue(self, task: Task, d: Decisions, front: bool = False) -> None:
        """Queue a task that is ready again (a retry, or handed back by an agent)."""
        task.state = QUEUED
        if task.place is not None:
            self._enqueue_placed(task, d)
        else:
            self._push(task, front)

    def cancel(self, tids: list[int], owner: bytes) -> tuple[list[int], Decisions]:
        """Cancel tasks not yet dispatched; returns the tids really cancelled.

        Tasks already on an agent are listed in ``Decisions.revoke`` (agent -> tids): the
        agent may still hold them unstarted in its queue; see :meth:`cancelled_on_agent`.
        """
        d = Decisions()
        done: list[int] = []
        for tid in tids:
            task = self.tasks.get(tid)
            if task is None or task.owner != owner:
                continue
            if task.state == DISPATCHED:
                if task.agent is not None:
                    d.revoke.setdefault(task.agent, []).append(tid)
                continue
            if task.state == QUEUED and not task.static:
                self._unqueue(task)
            elif task.state == BACKOFF:
                pass  # waiting for its retry: requeue() will not find it
            elif task.static:
                self.pending_static = [t for t in self.pending_static if t.tid != tid]
            done.append(tid)
            self._finish(task, CANCELLED, b"", d, notify_owner=False)
        return done, d

    def cancelled_on_agent(self, agent_name: bytes, tids: list[int]) -> Decisions:
        """The agent dropped these tasks from its queue before they started."""
        d = Decisions()
        agent = self.agents.get(agent_name)
        for tid in tids:
            task = self.tasks.get(tid)
            if task is None or task.agent != agent_name:
                continue
            self._unrun(agent, task)
            self._finish(task, CANCELLED, b"", d, notify_owner=False)
        self._fill_waiting(d)
        return d

    def _unqueue(self, task: Task) -> None:
        if task.need is not None and self._unqueue_shaped(task):
            return
        place = self.agents.get(task.place) if task.place is not None else None
        if place is not None:
            try:
                place.own.remove(task.tid)
                self.placed -= 1
                return
            except ValueError:
                pass
        try:
            self.ready.remove(task)
        except ValueError:
            self._unqueue_est(task)
        if not self.ready and self._lower:
            self._refill()

    def cancel_owner(self, owner: bytes, owner_num: int | None = None) -> Decisions:
        """The owner went away: drop its queued tasks, revoke dispatched ones (the agent
        stops them), and with ``owner_num`` the same for sub-tasks of its tasks."""
        d = Decisions()
        mine = [t for t in self.tasks.values()
                if t.owner == owner or (owner_num is not None and t.spec[T_OWNER] == owner_num)]
        for task in mine:
            if task.state == DISPATCHED and task.agent is not None:
                d.revoke.setdefault(task.agent, []).append(task.tid)
                self._unrun(self.agents.get(task.agent), task)
            if task.tid == self.resv_tid:
                self._unreserve()
            self._finish(task, CANCELLED, b"", d, notify_owner=False)
        if self.ready:
            self.ready = deque(t for t in self.ready if t.state != DONE)
        if self._lower:
            self._purge_est()
        if self.nshaped:
            for key in list(self.shaped):
                q = deque(t for t in self.shaped[key] if t in self.tasks)
                self.nshaped -= len(self.shaped[key]) - len(q)
                if q:
                    self.shaped[key] = q
                else:
                    del self.shaped[key]
        if self.placed:
            for agent in self.agents.values():
                if agent.own:
                    agent.own = deque(t for t in agent.own if t in self.tasks)
            self.placed = sum(len(a.own) for a in self.agents.values())
        self._fill_waiting(d)  # the freed slots go to the others' tasks
        return d

    # ---- internals ----------------------------------------------------------------
    def _finish(
        self,
        task: Task,
        status: int,
        payload: bytes,
        d: Decisions,
        num: int = 0,
        item: list[Any] | None = None,
        notify_owner: bool = True,
        journal: bool = True,
    ) -> None:
        del self.tasks[task.tid]
        task.state = DONE
        self.completed += 1
        if notify_owner:
            if item is not None:  # reuse the agent's list: [tid, status, payload, num, attempts]
                item[1] = status
                item[2] = payload
                item[3] = num
                if len(item) > 4:
                    item[4] = task.history
                else:
                    item.append(task.history)
            else:
                item = [task.tid, status, payload, num, task.history]
            d.result(task.owner, item)
        if journal and task.key is not None and status == OK:
            d.done_keys.append((task.key, status, payload))
        if status != 0:
            self.failed[task.tid] = status
        if task.dependents:
            for child_id in task.dependents:
                child = self.tasks.get(child_id)
                if child is None:
                    continue
                if status != 0:
                    why = "failed" if status in (ERR, DEPFAIL, TIMEOUT) else "was cancelled or lost"
                    self._finish(child, DEPFAIL, _err(f"dependency task {task.tid} {why}"), d)
                    continue
                child.ndeps -= 1
                if child.ndeps == 0 and child.state == WAITING:
                    child.state = QUEUED
                    if child.place is not None:
                        self._enqueue_placed(child, d)
                    elif child.need is not None:
                        self._push_shaped(child)
                    elif child.static:
                        self._place_static([child], d)
                    else:
                        self._push(child)
