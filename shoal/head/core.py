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

Dependencies: a task waits in ``waiting`` until every task it depends on succeeded;
if one failed or was cancelled it is resolved DEPFAIL without running. The head keeps
live tasks only: a dependency that is no longer live and not in ``failed`` succeeded.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from shoal.transport.protocol import CANCELLED, DEPFAIL, ERR

# positions in the task tuple (see transport.protocol)
T_ID, T_KIND, T_FID, T_PAYLOAD, T_DEPS, T_CORES, T_HINT, T_PLACE = range(8)

QUEUED, WAITING, DISPATCHED = 0, 1, 2


class Task:
    __slots__ = ("tid", "spec", "owner", "state", "agent", "cores", "ndeps", "dependents", "static",
                 "place", "hard")

    def __init__(self, tid: int, spec: list[Any], owner: bytes, static: bool) -> None:
        self.tid = tid
        self.spec = spec
        self.owner = owner
        self.state = QUEUED
        self.agent: bytes | None = None
        self.cores = spec[T_CORES] or 1
        self.ndeps = 0
        self.dependents: list[int] | None = None
        self.static = static
        self.place: bytes | None = None
        self.hard = False
        if len(spec) > T_PLACE and spec[T_PLACE]:
            name, hard = spec[T_PLACE]
            self.place = name.encode() if isinstance(name, str) else name
            self.hard = bool(hard)


@dataclass
class AgentState:
    name: bytes
    slots: int
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
    # (journal key, status, payload) of resolved tasks that carry opts["key"], in order
    done_keys: list[tuple[str, int, bytes]] = field(default_factory=list)

    def send(self, agent: bytes, spec: list[Any]) -> None:
        self.dispatch.setdefault(agent, []).append(spec)

    def result(self, owner: bytes, item: list[Any]) -> None:
        self.resolve.setdefault(owner, []).append(item)

    def __bool__(self) -> bool:
        return bool(self.dispatch or self.resolve or self.revoke or self.done_keys)


def _err(message: str) -> bytes:
    # A plain-text error the client turns into an exception (ERR payloads from the head
    # are text, not pickles: the head never pickles or unpickles user data).
    return message.encode()


class SchedulerCore:
    """Task table + ready queue + per-agent credit. See module docstring."""

    def __init__(self) -> None:
        self.tasks: dict[int, Task] = {}
        self.ready: deque[int] = deque()
        self.agents: dict[bytes, AgentState] = {}
        self.failed: dict[int, int] = {}          # tid -> status, for dependency checks
        self.pending_static: list[Task] = []      # static tasks waiting for a first agent
        self.completed = 0
        self.placed = 0                            # ready tasks waiting in agents' own queues

    # ---- agents -------------------------------------------------------------------
    def add_agent(self, name: bytes, slots: int) -> Decisions:
        self.agents[name] = AgentState(name, slots)
        d = Decisions()
        if self.pending_static:
            batch, self.pending_static = self.pending_static, []
            self._place_static(batch, d)
        self._fail_impossible(d)
        return d

    def remove_agent(self, name: bytes, reason: str) -> Decisions:
        """The agent left or was lost: its unfinished tasks are resolved as lost."""
        d = Decisions()
        agent = self.agents.pop(name, None)
        if agent is None:
            return d
        from shoal.transport.protocol import LOST

        for tid in sorted(agent.running):
            task = self.tasks.get(tid)
            if task is not None:
                self._finish(task, LOST, _err(f"agent {name.decode()} was lost: {reason}"), d)
        self.placed -= len(agent.own)
        for tid in agent.own:
            task = self.tasks.get(tid)
            if task is None:
                continue
            if task.hard:
                self._finish(task, LOST, _err(f"agent {name.decode()} it was placed on left: {reason}"), d)
            else:
                self.ready.append(tid)
        agent.own.clear()
        if not self.agents:
            return d
        if self.ready:
            self._fill_all(d)
        self._fail_impossible(d)
        return d

    def total_slots(self) -> int:
        return sum(a.slots for a in self.agents.values())

    def set_window(self, name: bytes, window: int) -> Decisions:
        """The agent wants ``window`` cores' worth of unfinished tasks (absolute, so a
        smaller window takes effect at once and no credit is ever lost or double-counted)."""
        d = Decisions()
        agent = self.agents.get(name)
        if agent is None:
            return d
        agent.window = window
        self._fill(agent, d)
        return d

    # ---- tasks --------------------------------------------------------------------
    def submit(self, specs: list[list[Any]], owner: bytes, static: bool = False) -> Decisions:
        d = Decisions()
        tasks = self.tasks
        fresh: list[Task] = []
        for spec in specs:
            task = Task(spec[T_ID], spec, owner, static)
            tasks[task.tid] = task
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
        if agent is None:
            if task.hard:
                self._finish(task, ERR, _err(f"no agent named {task.place.decode()!r} is connected"), d)  # type: ignore[union-attr]
            else:
                self.ready.append(task.tid)
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
        d = Decisions()
        agent = self.agents.get(agent_name)
        for item in results:
            task = self.tasks.get(item[0])
            if task is None:
                continue  # cancelled or already resolved
            if agent is not None and task.tid in agent.running:
                agent.running.discard(task.tid)
                agent.inflight -= task.cores
            self._finish(task, item[1], item[2], d, item)
        if self.ready or self.placed:
            self._fill_all(d)
        return d

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

    def cancel_owner(self, owner: bytes) -> Decisions:
        """The owner went away: drop its queued tasks, revoke dispatched ones."""
        d = Decisions()
        for task in [t for t in self.tasks.values() if t.owner == owner]:
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
        return d

    # ---- internals ----------------------------------------------------------------
    def _finish(
        self,
        task: Task,
        status: int,
        payload: bytes,
        d: Decisions,
        item: list[Any] | None = None,
        notify_owner: bool = True,
    ) -> None:
        del self.tasks[task.tid]
        self.completed += 1
        if notify_owner:
            d.result(task.owner, item if item is not None else [task.tid, status, payload, None])
        opts = task.spec[8] if len(task.spec) > 8 else None  # journal (until the rework fills it)
        if isinstance(opts, dict) and opts.get("key"):
            d.done_keys.append((opts["key"], status, payload))
        if status != 0:
            self.failed[task.tid] = status
        if task.dependents:
            for child_id in task.dependents:
                child = self.tasks.get(child_id)
                if child is None:
                    continue
                if status != 0:
                    why = "failed" if status in (ERR, DEPFAIL) else "was cancelled or lost"
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
        agents = sorted(self.agents.values(), key=lambda a: -a.credit)
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
            if out is None:
                out = d.dispatch.setdefault(agent.name, [])
            out.append(task.spec)
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
        slots = [(a, i) for a in self.agents.values() for i in range(a.slots)]
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
                spec = list(task.spec)
                spec[T_HINT] = index
                d.send(agent.name, spec)
            pos += size
