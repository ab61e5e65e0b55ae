"""Filling agents with plain tasks: a mixin of :class:`shoal.head.core.SchedulerCore`.

The hot path of the dynamic schedule: each agent's credit (window less what it holds) is
filled with the oldest ready tasks. Agents that may have credit sit on a heap (most credit
first; an agent whose credit grew is marked and pushed when the next pass starts), so a
result refills its own agent in O(log agents) instead of sorting them all; a burst goes to
free cores first, then to the prefetch. Also: placed tasks (an agent's own queue, steals
by idle agents) and the static schedule's blocks.

Tasks with a stated run time (``opts["estimate"]``) go longest first (LPT: the run's tail is
made of its shortest tasks). They are kept in buckets of about 4% (``need.est_bucket``):
``ready`` holds the longest bucket, the others wait in ``_lower`` and move into ``ready``
when it empties, so the hot path still pops one deque. A task without an estimate joins
whatever ``ready`` holds. While ``ready`` holds tasks estimated at ``PREFETCH_LONG_S`` or
more, nothing is prefetched: each goes only to a free core.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Any

from shoal.head.need import DISPATCHED, DONE, LONG_BUCKET, UNKNOWN
from shoal.transport.protocol import T_ATTEMPT, T_HINT

if TYPE_CHECKING:
    from collections.abc import Callable

    from shoal.head.state import AgentState, Decisions, Task


class Filling:
    """Mixin: the plain tasks' fill (module docstring). What it uses of the core:"""

    tasks: dict[int, Task]
    ready: deque[Task]
    agents: dict[bytes, AgentState]
    nshaped: int
    placed: int
    paused: bool
    big_first: bool
    resv_tid: int | None
    pending_static: list[Task]
    _open: list[tuple[int, int, bytes]]
    _open_at: dict[bytes, int]
    _dirty: set[bytes]
    _min_slots: int
    _pass: Callable[[Decisions], None]
    _unreserve: Callable[[], None]
    _fits: Callable[..., bool]
    _take_shaped: Callable[[AgentState, Task, Decisions], None]
    _fail_impossible: Callable[..., bool]
    _top: int | None
    _lower: dict[int, deque[Task]]
    _lower_keys: list[int]
    _nlower: int
    planning: bool
    _plan_turn: Callable[[Decisions], bool]

    # ---- tasks with estimates: longest bucket first ---------------------------------------
    def _push_est(self, task: Task) -> None:
        """Queue a plain task with an estimate in its bucket (see module docstring)."""
        b, ready = task.est, self.ready
        assert b is not None
        top = self._top
        if top is None:
            if not ready:
                self._top = b
                ready.append(task)
                return
            top = self._top = UNKNOWN  # tasks without estimates wait in ready: first
        if b == top:
            ready.append(task)
        elif b < top:
            q = self._lower.get(b)
            if q is None:
                q = self._lower[b] = deque()
                heapq.heappush(self._lower_keys, -b)
            q.append(task)
            self._nlower += 1
        else:  # longer than what ready holds: that bucket steps down (in place: callers
            # hold references to ready)
            q = self._lower.get(top)
            if q is None:
                self._lower[top] = deque(ready)
                heapq.heappush(self._lower_keys, -top)
            else:
                q.extendleft(reversed(ready))
            self._nlower += len(ready)
            ready.clear()
            ready.append(task)
            self._top = b

    def _refill(self) -> bool:
        """``ready`` is empty: the longest waiting bucket moves in. False: none waits."""
        keys, lower = self._lower_keys, self._lower
        while keys:
            b = -heapq.heappop(keys)
            q = lower.pop(b, None)
            if q:
                self._nlower -= len(q)
                self.ready.extend(q)
                self._top = b
                return True
        self._top = None
        return False

    def _unqueue_est(self, task: Task) -> None:
        q = self._lower.get(task.est) if task.est is not None else None
        if q is not None:
            try:
                q.remove(task)
                self._nlower -= 1
            except ValueError:
                pass

    def _purge_est(self) -> None:
        """Drop resolved tasks from the waiting buckets (an owner went away)."""
        n = 0
        for b, q in list(self._lower.items()):
            keep = deque(t for t in q if t.state != DONE)
            self._lower[b] = keep
            n += len(keep)
        self._nlower = n
        if not self.ready:
            self._refill()

    def _no_prefetch(self) -> bool:
        """Whether ready's tasks are estimated long: free cores only, no prefetch."""
        top = self._top
        return top is not None and LONG_BUCKET <= top < UNKNOWN

    def _mark(self, a: AgentState) -> None:
        """``a``'s credit may have grown: the next pass of :meth:`_fill_all` looks at it."""
        self._dirty.add(a.name)

    def _settle(self) -> None:
        """Push the agents marked since the last pass onto the heap (at their credit now)."""
        dirty, self._dirty = self._dirty, set()
        heap, at, agents = self._open, self._open_at, self.agents
        push = heapq.heappush
        for name in dirty:
            a = agents.get(name)
            if a is None or a.draining:
                continue
            c = a.window - a.inflight
            if c > 0 and at.get(name, 0) < c:
                at[name] = c
                push(heap, (-c, a.order, name))
        if len(heap) > 2 * len(agents) + 64:  # stale entries: rebuild
            heap[:] = [(-c, agents[n].order, n) for n, c in at.items() if n in agents]
            heapq.heapify(heap)

    def _fill_all(self, d: Decisions) -> None:
        if self.paused:
            return
        if self.planning and self._plan_turn(d):  # (shoal.head.planning)
            return
        if not self.ready and self._lower:
            self._refill()
        if self.nshaped:
            self._pass(d)
            return
        if self.resv_tid is not None:  # a plain holder: FIFO order keeps its turn now
            self._unreserve()
        if self.placed:
            self._fill_every(d)
            return
        dirty = self._dirty
        if len(dirty) == 1 and not self._open:  # one agent may have credit: the steady state
            a = self.agents.get(next(iter(dirty)))
            if a is not None and not a.draining:
                dirty.clear()
                self._fill_one(a, d)
                return
        # A burst spreads over agents: first every agent gets what its free cores can start
        # now, then the prefetch, most credit first.
        self._fill_heap(d, True)
        if self.ready and not self._no_prefetch():
            self._fill_heap(d, False)

    def _fill_one(self, a: AgentState, d: Decisions) -> None:
        """Fill the one agent whose credit may have grown: its free cores, then (unless
        ready's tasks are long) its prefetch. ``a`` is not draining.

        The steady state of a run whose results come one at a time: the agent has room for
        one more 1-core task, and ready's first live task is one; it goes at once, without
        the general fill's setup (anything else: the general fill, which then does the same
        as without this)."""
        top = self._top
        long = top is not None and LONG_BUCKET <= top < UNKNOWN
        inflight, window = a.inflight, a.window
        free = min(window, a.slots - a.held) - inflight
        if (free if long else window - inflight) == 1:
            ready = self.ready
            while ready:
                task = ready.popleft()
                if task.state == DONE:
                    continue
                if task.cores != 1:
                    ready.appendleft(task)
                    break
                name = a.name
                task.state = DISPATCHED
                task.agent = name
                a.running.add(task.tid)
                spec = task.spec
                spec[T_ATTEMPT] = task.attempt = task.attempt + 1
                out = d.dispatch.get(name)
                if out is None:
                    d.dispatch[name] = [spec]
                else:
                    out.append(spec)
                inflight = a.inflight = inflight + 1
                if not ready and self._lower:  # keep the rule: ready empty, no bucket waits
                    self._refill()
                if window > inflight and (not long or a.slots > a.held + inflight):
                    self._dirty.add(name)  # (_mark, as _fill's end)
                if long and window > inflight and ready and not self._no_prefetch():
                    self._fill(a, d)  # the next bucket is short: prefetched, as below
                return
        if free > 0:
            self._fill(a, d, free)
        if self.ready and a.window > a.inflight and not self._no_prefetch():
            self._fill(a, d)

    def _fill_heap(self, d: Decisions, spread: bool) -> None:
        """Fill agents off the credit heap, most credit first (``spread``: each only up to
        its free cores). Without ``spread`` the first agent that cannot take the queue's
        head ends the pass (every other one has less credit), unless some agent is too small
        for that task (then one with less credit may take the ones behind)."""
        if self._dirty:
            self._settle()
        later: list[AgentState] = []
        heap, at, agents, ready = self._open, self._open_at, self.agents, self.ready
        pop = heapq.heappop
        seen: set[bytes] = set()
        while ready and heap:
            negc, _, name = heap[0]
            if at.get(name) != -negc:
                pop(heap)  # stale: a newer entry holds this agent
                continue
            a = agents.get(name)
            c = -negc
            if a is None or a.draining or a.window - a.inflight != c:
                pop(heap)
                del at[name]
                if a is not None and not a.draining and a.window > a.inflight:
                    c = at[name] = a.window - a.inflight  # credit fell since: at its place now
                    heapq.heappush(heap, (-c, a.order, name))
                continue
            head: Task | None = ready[0]
            if head.state == DONE:  # type: ignore[union-attr]
                head = None
            if spread:
                free = min(c, a.slots - a.held - a.inflight)
                if name in seen:
                    break
                pop(heap)
                del at[name]
                seen.add(name)
                if free > 0 and (head is None or head.cores <= free or head.cores > a.slots):
                    self._fill(a, d, free)
                else:
                    later.append(a)  # nothing free for the head here: the prefetch pass
                continue
            if name in seen or (head is not None and head.cores > c):
                if head is not None and head.cores > self._min_slots:
                    self._fill_every(d)  # some agent is too small for it: try them all
                break
            pop(heap)
            del at[name]
            seen.add(name)
            self._fill(a, d)
        if later and not self._no_prefetch():  # (no prefetch: they wait for a result)
            for a in later:
                self._mark(a)

    def _fill_every(self, d: Decisions) -> None:
        """Fill every agent, most credit first (own queues, steals, mixed agent sizes)."""
        agents = sorted((a for a in self.agents.values() if not a.draining), key=lambda a: -a.credit)
        for agent in agents:
            if not (self.ready or self.placed):
                break
            self._fill(agent, d)

    def _fill(self, agent: AgentState, d: Decisions, limit: int | None = None) -> None:
        """Send ``agent`` the oldest ready tasks its credit (at most ``limit``) holds."""
        if self.paused:
            return
        if self.nshaped:  # shaped tasks wait: place oldest first over every agent
            self._pass(d)
            return
        if self.resv_tid is not None:
            self._unreserve()
        if agent.own:
            self._fill_own(agent, d)
        ready = self.ready
        slots = agent.slots
        inflight = agent.inflight
        credit = agent.window - inflight  # kept locally: this loop is the hot path
        if limit is not None and limit < credit:
            credit = limit
        top = self._top
        long = top is not None and LONG_BUCKET <= top < UNKNOWN
        if long:  # long tasks: free cores only
            free = slots - agent.held - inflight
            if free < credit:
                credit = free
        skipped: list[Task] | None = None
        if credit > 0:
            start = credit
            big_first = self.big_first
            free0 = slots - agent.held - inflight + start  # free cores = free0 - credit
            name, running = agent.name, agent.running
            out: list[list[Any]] | None = None
            while credit > 0:
                if not ready:
                    if not self._lower or not self._refill():  # (a shorter bucket: the limit
                        break                                       # above stays, conservative)
                    continue
                task = ready.popleft()
                if task.state == DONE:
                    continue
                cores = task.cores
                if cores > credit or cores > slots or (
                        cores > 1 and big_first and cores > free0 - credit):
                    if cores > slots:
                        if skipped is None:
                            skipped = []
                        skipped.append(task)  # never fits this agent; another may take it
                        continue
                    ready.appendleft(task)  # wait for enough credit (big_first: free cores)
                    break
                credit -= cores
                task.state = DISPATCHED
                task.agent = name
                running.add(task.tid)
                spec = task.spec
                spec[T_ATTEMPT] = task.attempt = task.attempt + 1
                if out is None:
                    out = d.dispatch.get(name)
                    if out is None:
                        out = d.dispatch[name] = []
                out.append(spec)
            inflight = agent.inflight = inflight + start - credit
            if not ready and self._lower:  # keep the rule: ready empty, no bucket waits
                self._refill()
        if skipped:
            ready.extendleft(reversed(skipped))
            self._fail_impossible(d, skipped)
        if self.placed and agent.window > agent.inflight and not agent.own:
            self._steal(agent, d)
        if agent.window > agent.inflight and (not long or slots > agent.held + agent.inflight):
            self._dirty.add(agent.name)  # (_mark; no prefetch: only with free cores, else a
            # result marks it)

    def _take(self, agent: AgentState, task: Task, d: Decisions) -> None:
        agent.inflight += task.cores
        task.state = DISPATCHED
        task.agent = agent.name
        agent.running.add(task.tid)
        task.spec[T_ATTEMPT] = task.attempt = task.attempt + 1
        d.send(agent.name, task.spec)

    def _fill_own(self, agent: AgentState, d: Decisions) -> None:
        own, tasks = agent.own, self.tasks
        while own and agent.credit > 0:
            task = tasks.get(own[0])
            if task is None:
                own.popleft()
                self.placed -= 1
                continue
            if task.need is not None:
                if not self._fits(agent, task.need, False):
                    break
                own.popleft()
                self.placed -= 1
                self._take_shaped(agent, task, d)
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
                if task.hard or task.cores > thief.credit or (
                        task.need is not None and not self._fits(thief, task.need, False)):
                    keep.append(tid)
                    continue
                self.placed -= 1
                if task.need is not None:
                    self._take_shaped(thief, task, d)
                else:
                    self._take(thief, task, d)
            if keep:
                own.extendleft(reversed(keep))
            if thief.credit <= 0:
                return

    def _place_static(self, batch: list[Task], d: Decisions) -> None:
        if not batch:
            return
        if not self.agents or self.paused:
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
                task.spec[T_ATTEMPT] = task.attempt = task.attempt + 1
                spec = list(task.spec)
                spec[T_HINT] = index
                d.send(agent.name, spec)
            pos += size
