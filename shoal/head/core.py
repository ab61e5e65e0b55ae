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

Dependencies: a task waits in ``waiting`` until every task it depends on succeeded;
if one failed or was cancelled it is resolved DEPFAIL without running. The head keeps
live tasks only: a dependency that is no longer live and not in ``failed`` succeeded.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

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
    TASK_LEN,
    TIMEOUT,
)

__all__ = ["SchedulerCore", "Decisions", "T_ID", "T_KIND", "T_FID", "T_PAYLOAD", "T_DEPS",
           "T_CORES", "T_HINT", "T_PLACE", "T_OPTS", "T_ATTEMPT", "T_OWNER"]

# QUEUED: ready (in ``ready`` or an agent's own queue); BACKOFF: a failed attempt waits
# for its retry (the server calls ``requeue`` when the delay is over)
QUEUED, WAITING, DISPATCHED, BACKOFF = 0, 1, 2, 3

CRASH_LIMIT = 3
BACKOFF_BASE_S = 0.05      # first retry after an exception waits this long, doubling
BACKOFF_MAX_S = 5.0
# what a time-out is, for retry_on (the agent sends no exception for it)
_TIMEOUT_TYPES = ("shoal.client.future.TaskTimeout", "builtins.TimeoutError",
                  "builtins.OSError", "builtins.Exception")
_EXIT_TYPES = ("shoal.client.command.CommandError", "builtins.Exception")
_STATUS_WORD = {ERR: "raised", LOST: "lost", TIMEOUT: "timed out", OK: "exited non-zero"}


class Task:
    __slots__ = ("tid", "spec", "owner", "state", "agent", "cores", "ndeps", "dependents", "static",
                 "place", "hard", "opts", "crashes", "failures", "history", "key")

    def __init__(self, tid: int, spec: list[Any], owner: bytes, static: bool,
                 owner_num: int | None) -> None:
        self.tid = tid
        n = len(spec)
        if n < TASK_LEN:
            spec.extend([None] * (TASK_LEN - n))
        spec[T_ATTEMPT] = 0
        self.spec = spec
        if owner_num is not None:
            spec[T_OWNER] = owner_num
        self.owner = owner
        self.state = QUEUED
        self.agent: bytes | None = None
        self.cores = spec[T_CORES] or 1
        self.ndeps = 0
        self.dependents: list[int] | None = None
        self.static = static
        self.place: bytes | None = None
        self.hard = False
        self.opts: dict[str, Any] | None = spec[T_OPTS]
        self.crashes = 0       # attempts lost in a row
        self.failures = 0      # attempts that raised, timed out or exited non-zero
        self.history: list[str] | None = None   # one line per failed attempt
        self.key: str | None = None  # journal key (given by the submitter or derived by the head)
        if spec[T_PLACE]:
            name, hard = spec[T_PLACE]
            self.place = name.encode() if isinstance(name, str) else name
            self.hard = bool(hard)


@dataclass
class AgentState:
    name: bytes
    slots: int
    num: int = 0         # stamped on the results of tasks it ran
    draining: bool = False   # leaving: gets nothing more
    window: int = 0      # cores' worth of unfinished tasks the agent wants (it says so)
    inflight: int = 0    # cores' worth of unfinished tasks it has
    running: set[int] = field(default_factory=set)
    own: deque[int] = field(default_factory=deque)  # tasks placed on this agent, ready

    @property
    def credit(self) -> int:
        return self.window - self.inflight


@dataclass
class Decisions:
    """What the server must do after an event."""

    # agent -> task specs to send it
    dispatch: dict[bytes, list[list[Any]]] = field(default_factory=dict)
    # owner -> results to deliver: [tid, status, payload, extra]
    resolve: dict[bytes, list[list[Any]]] = field(default_factory=dict)
    # agent -> tids to cancel there (best effort: not yet started)
    revoke: dict[bytes, list[int]] = field(default_factory=dict)
    # (journal key, status, payload) of resolved tasks that have a key, in order
    done_keys: list[tuple[str, int, bytes]] = field(default_factory=list)
    # (delay in seconds, tid): retries to requeue (``SchedulerCore.requeue``) after a delay
    later: list[tuple[float, int]] = field(default_factory=list)

    def send(self, agent: bytes, spec: list[Any]) -> None:
        self.dispatch.setdefault(agent, []).append(spec)

    def result(self, owner: bytes, item: list[Any]) -> None:
        self.resolve.setdefault(owner, []).append(item)

    def __bool__(self) -> bool:
        return bool(self.dispatch or self.resolve or self.revoke or self.done_keys or self.later)


def _err(message: str) -> bytes:
    # A plain-text error the client turns into an exception (ERR payloads from the head
    # are text, not pickles: the head never pickles or unpickles user data).
    return message.encode()


class SchedulerCore:
    """Task table + ready queue + per-agent credit. See module docstring."""

    def __init__(self, crash_limit: int = CRASH_LIMIT) -> None:
        self.tasks: dict[int, Task] = {}
        self.ready: deque[int] = deque()
        self.agents: dict[bytes, AgentState] = {}
        self.failed: dict[int, int] = {}          # tid -> status, for dependency checks
        self.pending_static: list[Task] = []      # static tasks waiting for a first agent
        self.completed = 0
        self.placed = 0                            # ready tasks waiting in agents' own queues
        self.crash_limit = max(1, crash_limit)
        self.retried = 0                           # attempts that became a new attempt
        self.requeued = 0                          # tasks handed back or taken from a lost agent
        self.departed: dict[bytes, str] = {}       # agents that left or were lost -> why

    # ---- agents -------------------------------------------------------------------
    def add_agent(self, name: bytes, slots: int, num: int = 0) -> Decisions:
        self.agents[name] = AgentState(name, slots, num)
        self.departed.pop(name, None)
        d = Decisions()
        if self.pending_static:
            batch, self.pending_static = self.pending_static, []
            self._place_static(batch, d)
        if self.ready or self.placed:
            self._fill_all(d)
        self._fail_impossible(d)
        return d

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
        label = name.decode(errors="replace")
        why = f"agent {label} was lost: {reason}" if lost else f"agent {label} left: {reason}"
        for tid in sorted(agent.running, reverse=True):  # each goes to the front: keep order
            task = self.tasks.get(tid)
            if task is None or task.agent != name:
                continue
            task.state = QUEUED
            task.agent = None
            if lost:
                self._attempt_failed(task, LOST, why.encode(), None, label, agent.num, d)
            else:
                self.requeued += 1
                self._enqueue(task, d, front=True)
        agent.running.clear()
        self.placed -= len(agent.own)
        for tid in agent.own:
            task = self.tasks.get(tid)
            if task is None:
                continue
            if task.hard:
                self._finish(task, LOST, _err(f"agent {label} it was placed on left: {reason}"), d)
            else:
                self.ready.append(tid)
        agent.own.clear()
        if not self.agents:
            return d
        if self.ready or self.placed:
            self._fill_all(d)
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
        agent.window = 0
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
                    self.ready.append(tid)
            self._fill_all(d)
        return d

    def returned(self, name: bytes, tids: list[int]) -> Decisions:
        """The agent handed these back unstarted: requeue them, no attempt counts."""
        d = Decisions()
        agent = self.agents.get(name)
        for tid in reversed(tids):
            task = self.tasks.get(tid)
            if task is None or task.agent != name or task.state != DISPATCHED:
                continue
            if agent is not None and tid in agent.running:
                agent.running.discard(tid)
                agent.inflight -= task.cores
            task.state = QUEUED
            task.agent = None
            self.requeued += 1
            self._enqueue(task, d, front=True)
        if self.ready or self.placed:
            self._fill_all(d)
        return d

    def requeue(self, tids: list[int]) -> Decisions:
        """The backoff of these retries is over: queue them again."""
        d = Decisions()
        for tid in tids:
            task = self.tasks.get(tid)
            if task is not None and task.state == BACKOFF:
                task.state = QUEUED
                self._enqueue(task, d)
        if self.ready or self.placed:
            self._fill_all(d)
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
        agent.window = window
        self._fill(agent, d)
        return d

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
        for i, spec in enumerate(specs):
            task = Task(spec[T_ID], spec, owner, static, owner_num)
            tasks[task.tid] = task
            if keys is not None:
                task.key = keys[i]
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
        if static:
            self._place_static([t for t in fresh if t.place is None], d)
            fresh = [t for t in fresh if t.place is not None]
        for task in fresh:
            if task.place is None:
                self.ready.append(task.tid)
            else:
                self._enqueue_placed(task, d)
        if fresh:
            self._fill_all(d)
        return d

    def _enqueue_placed(self, task: Task, d: Decisions) -> None:
        agent = self.agents.get(task.place)  # type: ignore[arg-type]
        if agent is None or agent.draining:
            if not task.hard:
                self.ready.append(task.tid)
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
        if task.cores > agent.slots:
            if task.hard:
                self._finish(task, ERR, _err(f"task asks for {task.cores} cores but agent "
                                             f"{agent.name.decode()} has {agent.slots}"), d)
            else:
                self.ready.append(task.tid)
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
        """
        d = Decisions()
        agent = self.agents.get(agent_name)
        num = agent.num if agent is not None else 0
        tasks = self.tasks
        for item in results:
            task = tasks.get(item[0])
            if task is None or task.agent != agent_name or task.state != DISPATCHED:
                continue  # resolved, cancelled, requeued: a stale attempt
            attempt = item[3] if len(item) > 3 else None
            if attempt is not None and attempt != task.spec[T_ATTEMPT]:
                continue
            if agent is not None and task.tid in agent.running:
                agent.running.discard(task.tid)
                agent.inflight -= task.cores
            status = item[1]
            info = item[4] if len(item) > 4 else None
            if status == OK and (info is None or not task.opts):
                self._finish(task, OK, item[2], d, num, item)
            elif status in (ERR, LOST, TIMEOUT, OK):
                task.state = QUEUED
                task.agent = None
                self._attempt_failed(task, status, item[2], info,
                                     agent_name.decode(errors="replace"), num, d, item)
            else:
                self._finish(task, status, item[2], d, num, item)
        if self.ready or self.placed:
            self._fill_all(d)
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
        elif front:
            self.ready.appendleft(task.tid)
        else:
            self.ready.append(task.tid)

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
            if agent is not None and tid in agent.running:
                agent.running.discard(tid)
                agent.inflight -= task.cores
            self._finish(task, CANCELLED, b"", d, notify_owner=False)
        if self.ready or self.placed:
            self._fill_all(d)
        return d

    def _unqueue(self, task: Task) -> None:
        place = self.agents.get(task.place) if task.place is not None else None
        if place is not None:
            try:
                place.own.remove(task.tid)
                self.placed -= 1
                return
            except ValueError:
                pass
        try:
            self.ready.remove(task.tid)
        except ValueError:
            pass

    def cancel_owner(self, owner: bytes, owner_num: int | None = None) -> Decisions:
        """The owner went away: drop its queued tasks, revoke dispatched ones (the agent
        stops them), and with ``owner_num`` the same for sub-tasks of its tasks."""
        d = Decisions()
        mine = [t for t in self.tasks.values()
                if t.owner == owner or (owner_num is not None and t.spec[T_OWNER] == owner_num)]
        for task in mine:
            if task.state == DISPATCHED and task.agent is not None:
                d.revoke.setdefault(task.agent, []).append(task.tid)
                agent = self.agents.get(task.agent)
                if agent is not None and task.tid in agent.running:
                    agent.running.discard(task.tid)
                    agent.inflight -= task.cores
            self._finish(task, CANCELLED, b"", d, notify_owner=False)
        if self.ready:
            self.ready = deque(t for t in self.ready if t in self.tasks)
        if self.placed:
            for agent in self.agents.values():
                if agent.own:
                    agent.own = deque(t for t in agent.own if t in self.tasks)
            self.placed = sum(len(a.own) for a in self.agents.values())
        if self.ready or self.placed:  # the freed slots go to the others' tasks
            self._fill_all(d)
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
                    elif child.static:
                        self._place_static([child], d)
                    else:
                        self.ready.append(child_id)

    def _fill_all(self, d: Decisions) -> None:
        # Most credit first, so a burst spreads over agents instead of filling one.
        agents = sorted((a for a in self.agents.values() if not a.draining), key=lambda a: -a.credit)
        for agent in agents:
            if not (self.ready or self.placed):
                break
            self._fill(agent, d)

    def _fill(self, agent: AgentState, d: Decisions) -> None:
        if agent.own:
            self._fill_own(agent, d)
        ready, tasks = self.ready, self.tasks
        out: list[list[Any]] | None = None
        skipped: list[int] = []
        while ready and agent.credit > 0:
            tid = ready.popleft()
            task = tasks.get(tid)
            if task is None:
                continue
            if task.cores > agent.credit:
                if task.cores > agent.slots:
                    skipped.append(tid)  # never fits this agent; another may take it
                    continue
                ready.appendleft(tid)  # wait for enough credit on this agent
                break
            agent.inflight += task.cores
            task.state = DISPATCHED
            task.agent = agent.name
            agent.running.add(tid)
            spec = task.spec
            spec[T_ATTEMPT] += 1
            if out is None:
                out = d.dispatch.setdefault(agent.name, [])
            out.append(spec)
        if skipped:
            ready.extendleft(reversed(skipped))
            self._fail_impossible(d)
        if self.placed and agent.credit > 0 and not agent.own:
            self._steal(agent, d)

    def _take(self, agent: AgentState, task: Task, d: Decisions) -> None:
        agent.inflight += task.cores
        task.state = DISPATCHED
        task.agent = agent.name
        agent.running.add(task.tid)
        task.spec[T_ATTEMPT] += 1
        d.send(agent.name, task.spec)

    def _fill_own(self, agent: AgentState, d: Decisions) -> None:
        own, tasks = agent.own, self.tasks
        while own and agent.credit > 0:
            task = tasks.get(own[0])
            if task is None:
                own.popleft()
                self.placed -= 1
                continue
            if task.cores > agent.credit:
                break
            own.popleft()
            self.placed -= 1
            self._take(agent, task, d)

    def _steal(self, thief: AgentState, d: Decisions) -> None:
        """``thief`` has room and nothing to do: take soft-placed tasks from full agents."""
        tasks = self.tasks
        for victim in self.agents.values():
            if victim is thief or not victim.own or victim.credit > 0:
                continue
            keep: deque[int] = deque()
            own = victim.own
            while own and thief.credit > 0:
                tid = own.popleft()
                task = tasks.get(tid)
                if task is None:
                    self.placed -= 1
                    continue
                if task.hard or task.cores > thief.credit:
                    keep.append(tid)
                    continue
                self.placed -= 1
                self._take(thief, task, d)
            if keep:
                own.extendleft(reversed(keep))
            if thief.credit <= 0:
                return

    def _fail_impossible(self, d: Decisions) -> None:
        """Fail tasks that ask for more cores than any agent has (while agents exist)."""
        if not self.agents:
            return
        biggest = max(a.slots for a in self.agents.values())
        bad = [tid for tid in self.ready if tid in self.tasks and self.tasks[tid].cores > biggest]
        if not bad:
            return
        bad_set = set(bad)
        self.ready = deque(t for t in self.ready if t not in bad_set)
        for tid in bad:
            task = self.tasks[tid]
            self._finish(
                task,
                ERR,
                _err(f"task asks for {task.cores} cores but the largest agent has {biggest}"),
                d,
            )

    def _place_static(self, batch: list[Task], d: Decisions) -> None:
        if not batch:
            return
        if not self.agents:
            self.pending_static.extend(batch)
            return
        slots = [(a, i) for a in self.agents.values() if not a.draining for i in range(a.slots)]
        if not slots:
            self.pending_static.extend(batch)
            return
        n, k = len(batch), len(slots)
        base, extra = divmod(n, k)
        pos = 0
        for s, (agent, index) in enumerate(slots):
            size = base + (1 if s < extra else 0)
            for task in batch[pos : pos + size]:
                task.state = DISPATCHED
                task.agent = agent.name
                agent.running.add(task.tid)
                agent.inflight += task.cores
                task.spec[T_ATTEMPT] += 1
                spec = list(task.spec)
                spec[T_HINT] = index
                d.send(agent.name, spec)
            pos += size
