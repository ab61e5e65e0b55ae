"""Resource placement for the scheduler core: task resource vectors, fits, reservations, MPI.

A task's request is ``cores`` (T_CORES: per task, per rank for MPI) plus these ``opts`` keys
(the resource contract): ``gpus`` and ``memory`` (bytes), per task or per rank; ``ranks`` (an
MPI task); ``nodes`` (spread its ranks over exactly that many agents); ``exclusive`` (its
agents run nothing else meanwhile). ``timeout`` is read too: a task with a time limit is not
started on an agent whose ``end_time`` comes before the limit would.

Plain tasks (no such key; any number of cores) stay on the core's fast path: a FIFO queue
and per-agent credit (window = cores x (1 + prefetch)). The others ("shaped") wait in one
FIFO per shape; while any waits, the core runs :meth:`Placement._pass`, which takes the
queues' heads oldest first (across shapes and the plain queue).

Accounting per agent (the head only counts; the agent picks CPU and GPU ids):
- cores: ``inflight`` (cores' worth of unfinished tasks sent to it, queued there or running)
  against its window; prefetch applies to cores only, and a task never goes to an agent
  with fewer cores than it asks for;
- GPUs and memory: the sum over its unfinished tasks never exceeds what it has (no prefetch:
  a GPU task is sent only when a GPU is free for it);
- ``held``: cores of MPI tasks led by another agent (this one is told nothing); while it
  holds some, its window is capped to its free cores (no prefetch) so it never runs more
  than it has.

MPI tasks (``ranks``): reserved at once or not at all, on agents with free cores now (no
prefetch), on as few agents as possible (``nodes=N``: exactly N, ranks spread evenly); the
task goes to the leader (the agent with most ranks) with ``opts["hosts"] = [[node, ranks,
cores_per_rank], ...]``, leader first; the other agents' shares are held until the leader's
result comes. Losing any participant loses the attempt.

Reservation (no starvation): the oldest queued task that fits nowhere now but could on
some agent, if it is large (more than one core, GPUs, memory, MPI, exclusive), becomes the
holder. The core reserves for it the agent(s) where it would start soonest: younger tasks
may go there only into what the holder leaves (backfill), so it starts as soon as the
tasks already there release enough. One holder at a time; it can still start elsewhere.

Policy ``big_first`` (off by default; ``SchedulerCore(big_first=True)``, ``shoal head
--big-first``): shaped tasks go before older plain ones, larger first (their ``seq`` is
moved ahead by their size); a task of several cores is sent only where its cores are free
now; and while shaped tasks wait no task is prefetched (a prefetched small task holds the
cores a large one waits for). On mixes of large and small tasks this is what keeps nodes
busy (docs/sim.md); the default keeps oldest-first order and prefetch.

Impossible requests: with at least one agent connected (not draining), a task that no agent
(or, for MPI, no set of agents) could ever hold fails at once, status ERR, one line naming
the task and what is missing. The rule is re-checked when an agent leaves or drains, so a
queued task that only the departed agent could run fails then. With no agent, tasks wait.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Any

from shoal.head.need import DISPATCHED, DONE, Need
from shoal.transport.protocol import ERR, T_ATTEMPT

if TYPE_CHECKING:
    from collections.abc import Callable

    from shoal.head.state import AgentState, Decisions, Task


_ALL = 1 << 40  # an exclusive reservation: every core


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _label(a: AgentState) -> str:
    return a.name.decode(errors="replace")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Placement:
    """Mixin of :class:`shoal.head.core.SchedulerCore`: the slow path for shaped tasks.

    What it uses of the core is declared here (set by the core's ``__init__``), so this module
    needs nothing from :mod:`shoal.head.core`.
    """

    tasks: dict[int, Task]
    ready: deque[Task]
    agents: dict[bytes, AgentState]
    shaped: dict[tuple[Any, ...], deque[int]]
    nshaped: int
    placed: int
    paused: bool
    clock: Callable[[], float]
    resv_tid: int | None
    resv_agents: tuple[bytes, ...]
    _live: list[AgentState]
    _plain_max: int
    _pass_free: int
    _pass_room: int
    _pass_gpus: int
    _holder_seen: bool
    _why_cache: dict[Any, str | None]
    _finish: Callable[..., None]
    _fill_own: Callable[[AgentState, Decisions], None]
    _steal: Callable[[AgentState, Decisions], None]
    _mark: Callable[[AgentState], None]
    _refill: Callable[[], bool]
    _no_prefetch: Callable[[], bool]
    _lower: dict[int, deque[Task]]
    _top: int | None
    big_first: bool

    # ---- queues of shaped tasks --------------------------------------------------------
    def _push_shaped(self, task: Task, front: bool = False) -> None:
        key = task.need.key  # type: ignore[union-attr]
        q = self.shaped.get(key)
        if q is None:
            q = self.shaped[key] = deque()
        if front:
            q.appendleft(task.tid)
        else:
            q.append(task.tid)
        self.nshaped += 1

    def _unqueue_shaped(self, task: Task) -> bool:
        key = task.need.key  # type: ignore[union-attr]
        q = self.shaped.get(key)
        if q is None:
            return False
        try:
            q.remove(task.tid)
        except ValueError:
            return False
        self.nshaped -= 1
        if not q:
            del self.shaped[key]
        if task.tid == self.resv_tid:
            self._unreserve()
        return True

    # ---- per-agent state -----------------------------------------------------------------
    def _rewindow(self, a: AgentState) -> None:
        """The window other tasks see: the agent's own, capped by held MPI shares (no
        prefetch then), by a reservation, or closed while an exclusive task runs."""
        base = a.want if not a.held else min(a.want, a.slots - a.held)
        a.base = base
        if a.excl:
            a.window = 0
        elif a.rv_cores:
            a.window = min(base, a.slots - a.held - a.rv_cores) if a.rv_strict else base - a.rv_cores
        else:
            a.window = base
        self._mark(a)

    def _ends_ok(self, a: AgentState, need: Need) -> bool:
        if need.limit is None or a.end_time is None:
            return True
        return self.clock() + need.limit <= a.end_time

    def _fits(self, a: AgentState, need: Need, holder: bool) -> bool:
        """Whether a single-agent task can be sent to ``a`` now (``holder``: it is the
        reservation's holder, which may use what is reserved)."""
        if a.excl or a.draining:
            return False
        c = need.cores
        room = a.base if holder else a.window
        if self.big_first:  # no prefetch while tasks with resources wait
            room = min(room, a.slots - a.held)
        if c > a.slots or c > room - a.inflight:
            return False
        if need.gpus and a.gpus_used + need.gpus + (0 if holder else a.rv_gpus) > a.gpus:
            return False
        if need.memory and a.memory and (a.mem_used + need.memory + (0 if holder else a.rv_mem)
                                         > a.memory):
            return False
        if need.exclusive and (a.inflight or a.held or a.gpus_used or a.mem_used
                               or (a.rv_cores and not holder)):
            return False
        return self._ends_ok(a, need)

    def _capable(self, a: AgentState, need: Need) -> bool:
        """Whether ``a`` could ever hold one task (one rank) of this request."""
        return (need.cores <= a.slots and need.gpus <= a.gpus
                and (not need.memory or not a.memory or need.memory <= a.memory))

    def _rank_room(self, a: AgentState, need: Need, holder: bool) -> int:
        """How many ranks of an MPI task ``a`` can take now (free cores: no prefetch)."""
        if a.excl or a.draining or not self._ends_ok(a, need):
            return 0
        if need.exclusive and (a.inflight or a.held or a.gpus_used or a.mem_used
                               or (a.rv_cores and not holder)):
            return 0
        free = min(a.slots - a.held, a.base if holder else a.window) - a.inflight
        r = free // need.cores
        if need.gpus:
            r = min(r, (a.gpus - a.gpus_used - (0 if holder else a.rv_gpus)) // need.gpus)
        if need.memory and a.memory:
            r = min(r, (a.memory - a.mem_used - (0 if holder else a.rv_mem)) // need.memory)
        return max(r, 0)

    @staticmethod
    def _rank_cap(a: AgentState, need: Need) -> int:
        r = a.slots // need.cores
        if need.gpus:
            r = min(r, a.gpus // need.gpus)
        if need.memory and a.memory:
            r = min(r, a.memory // need.memory)
        return r

    @staticmethod
    def _spread(need: Need, rooms: list[tuple[AgentState, int]]) -> list[tuple[AgentState, int]] | None:
        """Ranks over agents: as few as possible, or exactly ``nodes`` evenly; the leader
        (most ranks) first. ``rooms``: (agent, ranks it can take), in preference order."""
        rooms = sorted((x for x in rooms if x[1] > 0), key=lambda x: -x[1])
        ranks, nodes = need.ranks, need.nodes
        if nodes:
            if len(rooms) < nodes:
                return None
            base, extra = divmod(ranks, nodes)
            out = []
            for i, (a, room) in enumerate(rooms[:nodes]):
                want = base + (1 if i < extra else 0)
                if room < want:
                    return None
                out.append((a, want))
            return out
        out, left = [], ranks
        for a, room in rooms:
            take = min(room, left)
            out.append((a, take))
            left -= take
            if not left:
                return out
        return None

    # ---- dispatch and release ------------------------------------------------------------
    def _take_shaped(self, a: AgentState, task: Task, d: Decisions) -> None:
        need = task.need
        assert need is not None
        mem = need.memory if a.memory else 0
        free = a.slots - a.held - a.inflight
        if free > 0:  # keep the pass's count of free cores (an MPI quick test) exact
            self._pass_free -= min(free, need.cores)
        a.inflight += need.cores
        a.gpus_used += need.gpus
        a.mem_used += mem
        if need.exclusive:
            a.excl += 1
            self._rewindow(a)
        task.alloc = ((a.name, need.cores, need.gpus, mem),)
        self._sent(a, task, d)

    def _take_mpi(self, plan: list[tuple[AgentState, int]], task: Task,
                  d: Decisions) -> None:
        need = task.need
        assert need is not None
        hosts, alloc = [], []
        for i, (a, r) in enumerate(plan):
            cores, gpus = r * need.cores, r * need.gpus
            mem = r * need.memory if a.memory else 0
            if i == 0:
                a.inflight += cores
            else:
                a.held += cores
                a.holds.add(task.tid)
            a.gpus_used += gpus
            a.mem_used += mem
            if need.exclusive:
                a.excl += 1
            if i or need.exclusive:
                self._rewindow(a)
            self._pass_free -= cores
            hosts.append([a.node, r, need.cores])
            alloc.append((a.name, cores, gpus, mem))
        task.opts["hosts"] = hosts  # type: ignore[index]
        task.alloc = tuple(alloc)
        self._sent(plan[0][0], task, d)

    def _sent(self, a: AgentState, task: Task, d: Decisions) -> None:
        task.state = DISPATCHED
        task.agent = a.name
        a.running.add(task.tid)
        task.spec[T_ATTEMPT] = task.attempt = task.attempt + 1
        d.send(a.name, task.spec)
        if task.tid == self.resv_tid:
            self._unreserve()

    def _release(self, task: Task) -> None:
        """Give back what a dispatched shaped task holds on every agent."""
        alloc, task.alloc = task.alloc, None
        if not alloc:
            return
        excl = task.need is not None and task.need.exclusive
        for i, (name, cores, gpus, mem) in enumerate(alloc):
            a = self.agents.get(name)
            if a is None:
                continue
            if i == 0:
                a.running.discard(task.tid)
                a.inflight -= cores
                self._mark(a)
            else:
                a.held -= cores
                a.holds.discard(task.tid)
            a.gpus_used -= gpus
            a.mem_used -= mem
            if excl:
                a.excl -= 1
            if i or excl:
                self._rewindow(a)

    # ---- reservation ---------------------------------------------------------------------
    def _unreserve(self) -> None:
        names, self.resv_agents, self.resv_tid = self.resv_agents, (), None
        for name in names:
            a = self.agents.get(name)
            if a is not None:
                a.rv_cores = a.rv_gpus = a.rv_mem = 0
                a.rv_strict = False
                self._rewindow(a)

    def _reserve(self, task: Task, need: Need) -> bool:
        """Make ``task`` the holder (see module docstring); False when it cannot be."""
        if not need.big:
            return False
        if task.tid == self.resv_tid and all(n in self.agents for n in self.resv_agents):
            return True
        self._unreserve()
        live = [a for a in self.agents.values() if not a.draining and self._ends_ok(a, need)]
        if need.ranks:
            rooms = [(a, self._rank_cap(a, need)) for a in live]
            # soonest first: most free ranks now, then largest
            order = {a.name: (self._rank_room(a, need, True), n) for a, n in rooms}
            rooms.sort(key=lambda x: order[x[0].name], reverse=True)
            plan = self._spread(need, rooms)
            if plan is None:
                return False
            shares = [(a, r * need.cores, r * need.gpus, r * need.memory, True) for a, r in plan]
        else:
            best, best_score = None, None
            for a in live:
                if not self._capable(a, need):
                    continue
                # the share of the agent that must drain first (0: it only waits for credit)
                if need.exclusive:
                    short = (a.inflight + a.held) / a.slots
                else:
                    short = max(0, a.inflight + need.cores - a.base) / a.slots
                if need.gpus:
                    short = max(short, (a.gpus_used + need.gpus - a.gpus) / a.gpus)
                if need.memory and a.memory:
                    short = max(short, (a.mem_used + need.memory - a.memory) / a.memory)
                score = (short, -a.slots)
                if best_score is None or score < best_score:
                    best, best_score = a, score
            if best is None:
                return False
            shares = [(best, need.cores if need.cores > 1 else 0, need.gpus, need.memory, False)]
        for a, cores, gpus, mem, strict in shares:
            a.rv_cores = _ALL if need.exclusive else cores
            a.rv_gpus = a.gpus if need.exclusive else gpus
            a.rv_mem = a.memory if need.exclusive else (mem if a.memory else 0)
            a.rv_strict = strict
            self._rewindow(a)
        self.resv_tid = task.tid
        self.resv_agents = tuple(a.name for a, *_ in shares)
        return True

    # ---- the pass ------------------------------------------------------------------------
    def _pass(self, d: Decisions) -> None:
        """Place queued tasks oldest first across the plain queue and every shape."""
        live = [a for a in self.agents.values() if not a.draining]
        if not live:
            return
        self._live = live
        for a in live:
            if a.own:
                self._fill_own(a, d)
        if self.resv_tid is not None and self.resv_tid not in self.tasks:
            self._unreserve()
        self._pass_free = sum(max(0, a.slots - a.held - a.inflight) for a in live)
        # the most room and free GPUs any agent has (for a non-holder): only falls during
        # the pass, so a task asking for more fits nowhere without a scan of every agent
        cap = self.big_first
        self._pass_room = max(((min(a.window, a.slots - a.held) if cap else a.window) - a.inflight
                               for a in live if not a.excl), default=0)
        self._pass_gpus = max(a.gpus - a.gpus_used - a.rv_gpus for a in live)
        self._holder_seen = False
        tasks, ready, shaped = self.tasks, self.ready, self.shaped
        heads = [(tasks[q[0]].seq, key) for key, q in shaped.items()]
        heapq.heapify(heads)
        inf = float("inf")
        plain_open = True
        while True:
            pseq = inf
            if plain_open:
                while ready and ready[0].state == DONE:
                    ready.popleft()
                if not ready and self._lower and self._refill():
                    continue  # the next bucket of estimated tasks
                if ready:
                    pseq = ready[0].seq
            if heads and heads[0][0] < pseq:
                key = heads[0][1]
                bound = pseq
                if len(heads) > 1:
                    bound = min(bound, heads[1][0], heads[2][0] if len(heads) > 2 else inf)
                q = shaped[key]
                going = self._place_shape(q, bound, d)
                if not q:
                    del shaped[key]
                    heapq.heappop(heads)
                elif going:
                    heapq.heapreplace(heads, (tasks[q[0]].seq, key))
                else:
                    heapq.heappop(heads)  # blocked for this pass
            elif pseq < inf:
                plain_open = self._place_plain(heads[0][0] if heads else inf, d)
            else:
                break
        if not self._holder_seen and self.resv_tid is not None:
            self._unreserve()
        if not ready and self._lower:
            self._refill()
        self._live = []
        if self.placed:
            for a in live:
                if a.credit > 0 and not a.own:
                    self._steal(a, d)

    def _pick(self, need: Need, holder: bool, last: AgentState | None) -> AgentState | None:
        if last is not None and self._fits(last, need, holder):
            return last
        if not holder and (need.cores > self._pass_room or need.gpus > self._pass_gpus):
            return None
        best, room = None, None
        pack = self.big_first and not holder  # best fit: keep whole nodes for large tasks
        for a in self._live:
            if self._fits(a, need, holder):
                r = (a.base if holder else a.window) - a.inflight
                if room is None or (r < room if pack else r > room):
                    best, room = a, r
        return best

    def _place_shape(self, q: deque[int], bound: float, d: Decisions) -> bool:
        """Send tasks of one shape (its oldest first) while they are older than ``bound``;
        False when its head cannot go now (the shape is blocked for this pass)."""
        tasks = self.tasks
        task = tasks[q[0]]
        need = task.need
        assert need is not None
        if need.ranks:
            holder = task.tid == self.resv_tid
            plan = None
            total = need.ranks * need.cores
            if holder or self._pass_free >= total:
                simple = not (holder or need.gpus or need.memory or need.exclusive or need.limit)
                if simple:  # cores only: the room of _rank_room, inline (the costly part)
                    c = need.cores
                    rooms = [(a, (min(a.slots - a.held, a.window) - a.inflight) // c)
                             for a in self._live]
                else:
                    rooms = [(a, self._rank_room(a, need, holder)) for a in self._live]
                plan = self._spread(need, rooms)
                if plan is None and simple and not need.nodes:
                    self._pass_free = min(self._pass_free, total - 1)  # fewer are free
            if plan is None:
                return self._stuck(q, task, need, d)
            q.popleft()
            self.nshaped -= 1
            self._take_mpi(plan, task, d)
            return True
        agent = None
        while True:
            holder = task.tid == self.resv_tid
            agent = self._pick(need, holder, agent)
            if agent is None:
                return self._stuck(q, task, need, d)
            q.popleft()
            self.nshaped -= 1
            self._take_shaped(agent, task, d)
            if not q:
                return True
            task = tasks[q[0]]
            if task.seq > bound:
                return True

    def _place_plain(self, bound: float, d: Decisions) -> bool:
        """Send plain tasks while they are older than ``bound``; False when the queue's
        head cannot go now."""
        task = self.ready[0]
        cores = task.cores
        holder = task.tid == self.resv_tid
        agent, best = None, -1
        big_first = self.big_first or self._no_prefetch()
        # big_first: best fit (the agent with least room that holds it), so that small tasks
        # fill nodes up instead of taking a little of each, which no large task then fits
        pack = self.big_first and not holder
        for a in self._live:
            if a.excl or cores > a.slots:
                continue
            room = (a.base if holder else a.window) - a.inflight
            if big_first:  # no prefetch while tasks with resources (or long ones) wait
                room = min(room, a.slots - a.held - a.inflight)
            if room >= cores and (room > best if not pack or agent is None else room < best):
                agent, best = a, room
        if agent is None:
            if self._fail_impossible(d, [task]):
                return True
            if cores > 1 and not self._holder_seen:
                need = Need(cores, 0, 0, 0, 0, False, None)
                if self._reserve(task, need):
                    self._holder_seen = True
            return False
        slots = agent.slots
        free = slots - agent.held - agent.inflight
        try:
            return self._pour(agent, bound, d)
        finally:
            if free > 0:
                self._pass_free -= free - max(0, slots - agent.held - agent.inflight)

    def _pour(self, agent: AgentState, bound: float, d: Decisions) -> bool:
        ready = self.ready
        slots = agent.slots
        while ready or (self._lower and self._refill()):
            task = ready[0]
            if task.state == DONE:
                ready.popleft()
                continue
            tid = task.tid
            if task.seq > bound:
                return True
            cores = task.cores
            holder = tid == self.resv_tid
            room = (agent.base if holder else agent.window) - agent.inflight
            if self.big_first or self._no_prefetch():
                room = min(room, slots - agent.held - agent.inflight)
            if cores > slots or cores > room:
                return True  # the next pick chooses again
            ready.popleft()
            agent.inflight += cores
            task.state = DISPATCHED
            task.agent = agent.name
            agent.running.add(tid)
            task.spec[T_ATTEMPT] = task.attempt = task.attempt + 1
            d.send(agent.name, task.spec)
            if holder:
                self._unreserve()
        return True

    def _stuck(self, q: deque[int], task: Task, need: Need, d: Decisions) -> bool:
        """The head of a shape fits nowhere now: fail the shape if no agent could ever
        hold it, else make it the holder if none is yet. Returns whether to go on with it."""
        why = self._why_impossible(need)
        if why is not None:
            while q:
                tid = q.popleft()
                self.nshaped -= 1
                t = self.tasks.get(tid)
                if t is not None:
                    if tid == self.resv_tid:
                        self._unreserve()
                    self._finish(t, ERR, f"the task {why}".encode(), d)
            return True
        if not self._holder_seen and self._reserve(task, need):
            self._holder_seen = True
        return False

    # ---- impossible requests -------------------------------------------------------------
    def _why_impossible(self, need: Need) -> str | None:
        """Why no connected agent (set of agents) could ever run this request; None when
        one could, or when no agent is connected (tasks wait for one)."""
        key = need.capacity_key()
        cached = self._why_cache.get(key, False)
        if cached is not False:
            return cached
        live = [a for a in self.agents.values() if not a.draining]
        if not live:
            return None
        why = self._explain(need, live)
        self._why_cache[key] = why
        return why

    def _explain(self, need: Need, live: list[AgentState]) -> str | None:
        per = " per rank" if need.ranks else ""
        ok = [a for a in live if self._capable(a, need)]
        if not ok:
            short = []
            big = max(live, key=lambda a: a.slots)
            if need.cores > big.slots:
                short.append(f"{need.cores} cores{per} but the largest agent ({_label(big)}) "
                             f"has {big.slots}")
            big = max(live, key=lambda a: a.gpus)
            if need.gpus > big.gpus:
                short.append(f"{_plural(need.gpus, 'GPU')}{per} but the largest agent "
                             f"({_label(big)}) has {_plural(big.gpus, 'GPU')}")
            counted = [a for a in live if a.memory]
            if need.memory and len(counted) == len(live):
                big = max(counted, key=lambda a: a.memory)
                if need.memory > big.memory:
                    short.append(f"{_gib(need.memory)} of memory{per} but the largest agent "
                                 f"({_label(big)}) has {_gib(big.memory)}")
            if short:
                return "asks for " + "; and ".join(short)
            asked = [f"{need.cores} cores"]
            if need.gpus:
                asked.append(_plural(need.gpus, "GPU"))
            if need.memory:
                asked.append(f"{_gib(need.memory)} of memory")
            seen = ", ".join(f"{_label(a)} has {a.slots} cores, {_plural(a.gpus, 'GPU')}"
                             + (f", {_gib(a.memory)}" if a.memory else "") for a in live[:3])
            more = f" (and {len(live) - 3} more)" if len(live) > 3 else ""
            return f"asks for {' and '.join(asked)}{per}; no agent has all of it: {seen}{more}"
        if not need.ranks:
            return None
        rooms = [(a, self._rank_cap(a, need)) for a in ok]
        if self._spread(need, rooms) is not None:
            return None
        what = f"{need.ranks} ranks of {_plural(need.cores, 'core')}"
        if need.gpus:
            what += f" and {_plural(need.gpus, 'GPU')}"
        if need.nodes:
            each = -(-need.ranks // need.nodes)
            if len(live) < need.nodes:
                return f"asks for {what} on {need.nodes} nodes; only {_plural(len(live), 'agent')} connected"
            fit = sum(1 for _, r in rooms if r >= each)
            return (f"asks for {what} on {need.nodes} nodes (up to {each} per node); only "
                    f"{fit} of {_plural(len(live), 'agent')} can hold {each}")
        total = sum(r for _, r in rooms)
        return f"asks for {what}; all {_plural(len(live), 'agent')} together hold {total}"

    def _fail_impossible(self, d: Decisions, only: list[Task] | None = None) -> bool:
        """Fail queued tasks no connected agent could ever run (see module docstring);
        ``only``: just these plain tasks. Returns whether any failed."""
        if self.paused:
            return False
        live = [a for a in self.agents.values() if not a.draining]
        if not live:
            return False
        failed = False
        biggest = max(a.slots for a in live)
        if only is not None or self._plain_max > biggest:
            cands = only if only is not None else self.ready
            bad = [t for t in cands if t.state != DONE and t.cores > biggest and t.need is None]
            if bad:
                failed = True
                big = max(live, key=lambda a: a.slots)
                bad_set = set(bad)
                ready = self.ready  # in place: a pass holds a reference to it
                if only is not None:
                    for t in bad:
                        ready.remove(t)
                else:
                    keep = [t for t in ready if t not in bad_set]
                    ready.clear()
                    ready.extend(keep)
                if not ready and self._lower:
                    self._refill()
                for task in bad:
                    if task.tid == self.resv_tid:
                        self._unreserve()
                    self._finish(task, ERR, (f"the task asks for {task.cores} cores but the "
                                             f"largest agent ({_label(big)}) has {big.slots}").encode(), d)
        if only is None:
            for key in list(self.shaped):
                q = self.shaped[key]
                task = self.tasks[q[0]]
                if self._why_impossible(task.need) is not None:  # type: ignore[arg-type]
                    failed = True
                    self._stuck(q, task, task.need, d)  # type: ignore[arg-type]
                    del self.shaped[key]
        return failed
