"""Planning against stated run times: a mixin of :class:`shoal.head.core.SchedulerCore`
(``plan=True``, ``shoal head --plan``, ``shoal sim --policy plan``).

Greedy list scheduling (oldest first, longest first, big first) decides at each instant
which queued task takes the room that just freed; it cannot make the tasks' ends meet, so
a run ends with a drain (seed 003's mix: ~2,000 tasks of 8-10 min started after the
second round of large tasks had begun, and ran past it). When tasks state their run times
(``opts["estimate"]``), the core can instead lay the queued work out over its agents in
virtual time and dispatch by that layout:

- **The plan** (:func:`pack`): for a horizon ``H``, agent by agent, first its large tasks
  (those of which at most four fit it: more than a quarter of its cores or GPUs) by a list
  schedule in the agent's own time, longest first among those that still end by ``H``
  (so a task that follows another on the same cores is the longest that fits the time
  left: pairs whose lengths add up to about ``H``); then its small tasks into the room the
  large ones leave, again forward in time, each chosen to tile the gap before the next
  wall (the next large task's start, or ``H``): with ``g`` the gap and ``k`` how many of the
  shortest queued tasks fit it, the longest task no longer than ``g / k``. Every task must
  end by ``H``; the search tries ``H`` upward from the bound (work / cores, the longest
  task) until the whole queue fits, then bisects: the shortest horizon that holds
  everything is the plan (the dual approach to makespan: Hochbaum and Shmoys's "guess
  the makespan, then pack"). Running tasks count as busy until their expected end (their
  dispatch plus their estimate).
- **Dispatch by the plan**: each agent gets its planned tasks in planned order, each when
  its cores (and GPUs) are free there now; one that does not fit yet blocks the ones behind
  it, except that a later one may go first if it fits now and, by the estimates, ends
  before the blocked one could start (EASY backfilling, Lifka 1995: the blocked task is
  never delayed by it). With exact estimates the run replays the plan.
- **A whole submission at once**: the server (and the simulator) end a turn at
  ``core.TURN_TASKS`` submitted tasks only when the core does not plan (a plan of the first
  part of a submission would fill the agents with it); a turn still reads at most 10,000
  messages.
- **Replanning**: new estimated tasks (a submission, a retry, a task handed back) make the
  next turn plan again, from the running tasks' expected ends; agents joining or leaving
  too, at most once per ``REPLAN_GAP`` of the plan's span.
- **Giving up**: a plan is only as good as its estimates. Each planned task's result is
  compared with its expected end; once they miss by more than ``DEVIATION`` of the
  estimate on average (over at least ``DEVIATION_N`` results), the planned tasks go back to
  the usual queues (longest first, big first) and the core stops planning
  (``plan_dropped``: the clock then). A task's error then adds up along the plan's chains
  (two large tasks planned one after the other on the same cores both running long),
  where the usual path decides the second one when the first has really ended.

Only tasks with an estimate and at most cores and GPUs are planned (no MPI ranks,
memory, exclusive or placement); the others keep the core's usual path in the room the
plan leaves. Off by default: a plan costs CPU (seed 003's mix: ~0.6 s for 8,200 tasks on 256 agents),
worth it for tasks of minutes, not for a million tasks of seconds (more than
``PLAN_MAX_TASKS`` queued: no plan, the usual path).
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from typing import TYPE_CHECKING, Any

from shoal.head.need import QUEUED, UNKNOWN

if TYPE_CHECKING:
    from collections.abc import Callable

    from shoal.head.need import Need
    from shoal.head.state import AgentState, Decisions, Task

INF = float("inf")
BACKFILL_SCAN = 32      # planned tasks behind a blocked one that may go first (EASY)
DEVIATION = 0.05        # the plan is given up once planned tasks' ends miss their estimates
DEVIATION_N = 32        # by more than this share of them on average (over at least N)
REPLAN_GAP = 0.01        # agents joining or leaving replan at most once per this share of
                         # the plan's span (and 1 s)
PLAN_MAX_TASKS = 200_000  # more queued than this: no plan (a packing costs ~15 us a task)
SEARCH_STEPS = 4        # bisections of the horizon once a fitting one is known

# (cores, gpus, busy): an agent's capacity and what runs there, [(end, cores, gpus)] with
# ends relative to now (INF: unknown)
NodeIn = tuple[int, int, list[tuple[float, int, int]]]
# (duration, cores, gpus, tid)
TaskIn = tuple[float, int, int, int]


def _pools(tasks: list[TaskIn]) -> dict[tuple[int, int], tuple[list[float], list[int]]]:
    """Tasks by shape (cores, gpus): durations ascending and their tids."""
    pools: dict[tuple[int, int], tuple[list[float], list[int]]] = {}
    for dur, c, g, tid in sorted(tasks):
        p = pools.get((c, g))
        if p is None:
            p = pools[(c, g)] = ([], [])
        p[0].append(dur)
        p[1].append(tid)
    return pools


def _profile(intervals: list[tuple[float, float, int, int]]) -> list[tuple[float, int, int]]:
    """Cores and GPUs in use from each breakpoint on: [(time, cores, gpus)], from 0."""
    deltas: dict[float, list[int]] = {0.0: [0, 0]}
    for s, e, c, g in intervals:
        x = deltas.setdefault(s, [0, 0])
        x[0] += c
        x[1] += g
        if e < INF:
            x = deltas.setdefault(e, [0, 0])
            x[0] -= c
            x[1] -= g
    out, c, g = [], 0, 0
    for t in sorted(deltas):
        c += deltas[t][0]
        g += deltas[t][1]
        out.append((t, c, g))
    return out


def _pack_node(cap_c: int, cap_g: int, busy: list[tuple[float, int, int]], horizon: float,
               pools: dict[tuple[int, int], tuple[list[float], list[int]]],
               lkeys: list[tuple[int, int]], skeys: list[tuple[int, int]],
               left: list[int]) -> tuple[list[tuple[float, int]], float]:
    """Plan one agent (module docstring): [(start, tid)] in start order, and its last end.
    Takes the tasks it plans out of ``pools``; ``left[0]``: large tasks still in them."""
    out: list[tuple[float, int]] = []
    end = max((e for e, _, _ in busy if e < INF), default=0.0)
    committed = [(0.0, e, c, g) for e, c, g in busy]
    bisect_right, push, pop = bisect.bisect_right, heapq.heappush, heapq.heappop
    # large tasks: a list schedule in this agent's time, longest that ends by the horizon
    if left[0]:
        free_c = cap_c - sum(c for _, c, _ in busy)
        free_g = cap_g - sum(g for _, _, g in busy)
        ev = [(e, c, g) for e, c, g in busy if e < INF]
        heapq.heapify(ev)
        t = 0.0
        min_c = min(k[0] for k in lkeys)
        min_g = min(k[1] for k in lkeys)
        while left[0] and t < horizon:
            while free_c >= min_c and free_g >= min_g:
                best = None
                room = horizon - t
                for key in lkeys:
                    d = pools[key][0]
                    if not d or key[0] > free_c or key[1] > free_g:
                        continue
                    k = bisect_right(d, room) - 1
                    if k >= 0 and (best is None or d[k] > best[0]):
                        best = (d[k], key, k)
                if best is None:
                    break
                dur, key, k = best
                durs, tids = pools[key]
                del durs[k]
                tid = tids.pop(k)
                left[0] -= 1
                free_c -= key[0]
                free_g -= key[1]
                push(ev, (t + dur, key[0], key[1]))
                committed.append((t, t + dur, key[0], key[1]))
                out.append((t, tid))
                if t + dur > end:
                    end = t + dur
            if not ev:
                break
            t, c, g = pop(ev)
            free_c += c
            free_g += g
    # small tasks: forward in time into the room left, each tiling the gap to the next wall
    if skeys:
        end = _pack_small(cap_c, cap_g, horizon, pools, skeys, committed, out, end)
    out.sort(key=_start)  # stable: at one instant the large tasks go first
    return out, end


def _start(x: tuple[float, int]) -> float:
    return x[0]


def _pack_small(cap_c: int, cap_g: int, horizon: float,
                pools: dict[tuple[int, int], tuple[list[float], list[int]]],
                skeys: list[tuple[int, int]], committed: list[tuple[float, float, int, int]],
                out: list[tuple[float, int]], end: float) -> float:
    """The small tasks of :func:`_pack_node` (appended to ``out``); returns the last end."""
    bisect_right, push, pop = bisect.bisect_right, heapq.heappush, heapq.heappop
    segs = _profile(committed)
    nseg = len(segs)
    shapes = [(c, g, *pools[(c, g)]) for c, g in skeys if pools[(c, g)][0]]
    if not shapes:
        return end
    dmin = min(x[2][0] for x in shapes)
    used_c = used_g = 0
    sev: list[tuple[float, int, int]] = []
    t, si = 0.0, 0
    while t < horizon:
        while si + 1 < nseg and segs[si + 1][0] <= t:
            si += 1
        fc = cap_c - segs[si][1] - used_c
        fg = cap_g - segs[si][2] - used_g
        while fc > 0:
            best = None
            bscore = 0.0
            for shape in shapes:
                c, g, durs, _ = shape
                if c > fc or g > fg or not durs:
                    continue
                # the gap: until the committed use leaves no room for it, or the horizon
                gap = horizon - t
                for j in range(si + 1, nseg):
                    seg = segs[j]
                    if seg[1] + used_c + c > cap_c or seg[2] + used_g + g > cap_g:
                        gap = seg[0] - t
                        break
                if gap < durs[0]:
                    continue
                kk = int(gap // dmin) or 1
                k = bisect_right(durs, gap / kk) - 1
                while k < 0 and kk > 1:
                    kk -= 1
                    k = bisect_right(durs, gap / kk) - 1
                if k < 0:
                    continue
                score = durs[k] * kk / gap
                if best is None or score > bscore or (score == bscore and c > best[0]):
                    best, bk, bscore = shape, k, score
            if best is None:
                break
            c, g, durs, tids = best
            dur = durs.pop(bk)
            out.append((t, tids.pop(bk)))
            used_c += c
            used_g += g
            fc -= c
            fg -= g
            push(sev, (t + dur, c, g))
            if t + dur > end:
                end = t + dur
            if not durs:
                shapes = [x for x in shapes if x[2]]
                if not shapes:
                    return end
                dmin = min(x[2][0] for x in shapes)
            elif bk == 0 and dur == dmin:
                dmin = min(x[2][0] for x in shapes if x[2])
        nxt = segs[si + 1][0] if si + 1 < nseg else INF
        if sev and sev[0][0] <= nxt:
            t, c, g = pop(sev)
            used_c -= c
            used_g -= g
            while sev and sev[0][0] <= t:  # every end at this instant
                _, c, g = pop(sev)
                used_c -= c
                used_g -= g
        elif nxt < INF:
            t = nxt
        else:
            break
    return end


def pack(nodes: list[NodeIn], tasks: list[TaskIn], horizon: float,
         pools: dict[tuple[int, int], tuple[list[float], list[int]]] | None = None
         ) -> tuple[list[list[tuple[float, int]]], int, float]:
    """Lay ``tasks`` out on ``nodes`` so that each ends by ``horizon`` (module docstring):
    per node [(start, tid)] in start order (times relative to now), how many tasks did
    not fit, and the plan's last end."""
    if pools is None:
        pools = _pools(tasks)
    else:
        pools = {k: (list(d), list(t)) for k, (d, t) in pools.items()}
    keys_by_cap: dict[tuple[int, int], tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
    plans: list[list[tuple[float, int]]] = []
    last = 0.0
    for cap_c, cap_g, busy in nodes:
        ks = keys_by_cap.get((cap_c, cap_g))
        if ks is None:
            fit = [k for k in pools if k[0] <= cap_c and k[1] <= cap_g]
            large = sorted((k for k in fit if 4 * k[0] > cap_c or 4 * k[1] > cap_g), reverse=True)
            small = sorted((k for k in fit if not (4 * k[0] > cap_c or 4 * k[1] > cap_g)),
                           reverse=True)
            ks = keys_by_cap[(cap_c, cap_g)] = (large, small)
        left = [sum(len(pools[k][0]) for k in ks[0])]
        out, end = _pack_node(cap_c, cap_g, busy, horizon, pools, ks[0], ks[1], left)
        plans.append(out)
        last = max(last, end)
    return plans, sum(len(d) for d, _ in pools.values()), last


def plan_search(nodes: list[NodeIn], tasks: list[TaskIn]
                ) -> tuple[list[list[tuple[float, int]]], float, int]:
    """The shortest horizon that holds every task (module docstring): the plan, its last
    end, and the number of packings tried. Tasks no node could hold must not be given."""
    cap = sum(c for c, _, _ in nodes) or 1
    work = sum(d * c for d, c, _, _ in tasks)
    for _, _, busy in nodes:
        work += sum(e * c for e, c, _ in busy if e < INF)
    lo = max(work / cap, max((d for d, _, _, _ in tasks), default=0.0), 1e-9)
    pools = _pools(tasks)
    best: tuple[list[list[tuple[float, int]]], float] | None = None
    tries = 0
    bad, good, step = lo, None, 0.01
    while good is None:  # upward from the bound until everything fits
        h = lo * (1 + step)
        plans, left, last = pack(nodes, tasks, h, pools)
        tries += 1
        if not left:
            good, best = h, (plans, last)
        else:
            bad = h
            step *= 2
    for _ in range(SEARCH_STEPS):
        h = (bad + good) / 2
        plans, left, last = pack(nodes, tasks, h, pools)
        tries += 1
        if left:
            bad = h
        else:
            good = h
            if last < best[1]:  # type: ignore[index]
                best = (plans, last)
    assert best is not None
    return best[0], best[1], tries


def _seq(t: Task) -> int:
    return t.seq


class Planning:
    """Mixin: the plan and its dispatch (module docstring). What it uses of the core:"""

    tasks: dict[int, Task]
    ready: deque[Task]
    agents: dict[bytes, AgentState]
    shaped: dict[tuple[Any, ...], deque[int]]
    nshaped: int
    placed: int
    resv_tid: int | None
    clock: Callable[[], float]
    _dirty: set[bytes]
    _lower: dict[int, deque[Task]]
    _lower_keys: list[int]
    _nlower: int
    _top: int | None
    _take: Callable[[AgentState, Task, Decisions], None]
    _take_shaped: Callable[[AgentState, Task, Decisions], None]
    _unreserve: Callable[[], None]
    _ends_ok: Callable[[AgentState, Need], bool]
    _mark: Callable[[AgentState], None]

    def _plan_init(self, plan: bool) -> None:
        self.planning = plan
        self._plans: dict[bytes, deque[int]] = {}   # agent -> its planned tasks, in order
        self._nplan = 0                              # tasks in ``_plans`` (may count stale ones)
        self._plan_end: dict[int, float] = {}        # dispatched by the plan -> expected end
        self._plan_n = 0                             # tasks in the usual queues after a turn
        self._plan_stale = False                     # agents changed: plan again
        self._plan_h = 0.0                           # the plan's last end (clock time)
        self._plan_at = 0.0                          # when it was made (clock time)
        self.plan_runs = 0                           # plans made
        self.plan_tries = 0                          # packings tried for them
        self.plan_dropped: float | None = None       # when the plan was given up (clock)
        self._dev_sum = 0.0                          # |end - expected| / estimate, summed
        self._dev_n = 0
        if plan:  # (an instance attribute: the default path pays nothing for it)
            self.finished = self._finished_planned  # type: ignore[method-assign]

    def _finished_planned(self, agent_name: bytes, results: list[list[Any]]) -> Decisions:
        """``finished`` in plan mode: how far planned tasks' ends were from their estimates
        first (module docstring, "Giving up")."""
        ends = self._plan_end
        if ends and self.plan_dropped is None:
            now = self.clock()
            tasks = self.tasks
            for item in results:
                e = ends.pop(item[0], None)
                t = tasks.get(item[0])
                if e is None or t is None or t.agent != agent_name:
                    continue
                est = float(t.opts["estimate"] or 0)  # type: ignore[index]
                if est > 0:
                    self._dev_sum += abs(now - e) / est
                    self._dev_n += 1
            if self._dev_n >= DEVIATION_N and self._dev_sum > DEVIATION * self._dev_n:
                self._drop_plan()
        return type(self).finished(self, agent_name, results)  # type: ignore[attr-defined]

    def _take_planned(self) -> list[Task]:
        """Empty the plan: its tasks still queued (not yet dispatched), in plan order."""
        tasks, out = self.tasks, []
        for q in self._plans.values():
            for tid in q:
                t = tasks.get(tid)
                if t is not None and t.state == QUEUED:
                    out.append(t)
        self._plans = {}
        self._nplan = 0
        return out

    def _drop_plan(self) -> None:
        """Estimates are off: planned tasks back to the usual queues, no more plans."""
        self.plan_dropped = self.clock()
        back = self._take_planned()
        back.sort(key=_seq)
        self._park(back)
        for a in self.agents.values():
            self._mark(a)

    # ---- taking tasks in ---------------------------------------------------------------
    @staticmethod
    def _plannable(task: Task) -> bool:
        need = task.need
        return task.est is not None and task.place is None and (
            need is None or not (need.ranks or need.memory or need.exclusive))

    def _absorb(self) -> list[Task]:
        """Take the plannable tasks out of the usual queues."""
        tasks, ready, out = self.tasks, self.ready, []
        if ready or self._lower:
            keep: list[Task] = []
            for q in (ready, *self._lower.values()):
                for t in q:  # (tasks, not tids)
                    if t.state != QUEUED:
                        continue
                    if self._plannable(t):
                        out.append(t)
                    else:
                        keep.append(t)
            ready.clear()  # in place: others hold references to it
            ready.extend(keep)
            self._lower.clear()
            self._lower_keys.clear()
            self._nlower = 0
            self._top = UNKNOWN if ready else None
        if self.nshaped:
            for key in list(self.shaped):
                q = self.shaped[key]
                rest: deque[int] = deque()
                for tid in q:
                    t = tasks.get(tid)
                    if t is None:
                        continue
                    if self._plannable(t):
                        out.append(t)
                        if tid == self.resv_tid:
                            self._unreserve()
                    else:
                        rest.append(tid)
                self.nshaped -= len(q) - len(rest)
                if rest:
                    self.shaped[key] = rest
                else:
                    del self.shaped[key]
        return out

    # ---- the plan ------------------------------------------------------------------------
    def _replan(self, fresh: list[Task]) -> None:
        """Plan ``fresh`` and every planned task not yet dispatched, from now."""
        tasks, now = self.tasks, self.clock()
        pool = fresh + self._take_planned()
        live = [a for a in self.agents.values() if not a.draining]
        if not pool or not live or len(pool) > PLAN_MAX_TASKS:
            self._park(pool)
            return
        ends = self._plan_end
        for tid in [t for t in ends if t not in tasks]:
            del ends[tid]
        nodes: list[NodeIn] = []
        for a in live:
            busy: list[tuple[float, int, int]] = []
            for tid in a.running:
                t = tasks.get(tid)
                if t is None:
                    continue
                e = ends.get(tid)
                rem = INF if e is None else self._left(t, e, now)
                if t.alloc is not None:
                    _, c, g, _ = t.alloc[0]
                else:
                    c, g = t.cores, 0
                busy.append((rem, c, g))
            if a.held:
                busy.append((INF, a.held, 0))
            cap = min(a.slots, a.want) if a.want else a.slots
            nodes.append((cap, a.gpus, busy))
        big_c = max(n[0] for n in nodes)
        big_g = max(n[1] for n in nodes)
        items: list[TaskIn] = []
        unfit: list[Task] = []
        for t in pool:
            need = t.need
            c, g = (t.cores, 0) if need is None else (need.cores, need.gpus)
            if c > big_c or g > big_g:
                unfit.append(t)  # the usual path fails it (or waits for a larger agent)
                continue
            est = t.opts.get("estimate") if t.opts else None  # type: ignore[union-attr]
            items.append((float(est) if est and est > 0 else 0.0, c, g, t.tid))
        self._park(unfit)
        if not items:
            return
        plans, last, tries = plan_search(nodes, items)
        self.plan_runs += 1
        self.plan_tries += tries
        self._plan_h = now + last
        self._plan_at = now
        placed = set()
        for a, plan in zip(live, plans, strict=True):
            if plan:
                q = self._plans[a.name] = deque(tid for _, tid in plan)
                self._nplan += len(q)
                placed.update(q)
            self._mark(a)
        if len(placed) < len(items):  # (plan_search fits them all; kept for safety)
            self._park([tasks[tid] for _, _, _, tid in items if tid not in placed])

    def _park(self, back: list[Task]) -> None:
        """Tasks the plan does not hold: back to the usual queues."""
        for t in back:
            self._push(t)  # type: ignore[attr-defined]

    def _left(self, t: Task, end: float, now: float) -> float:
        """How long a running planned task still runs, by its estimate; one past it is given
        the mean miss seen so far (an overrun is not over now)."""
        if end > now:
            return end - now
        if not self._dev_n:
            return 0.0
        return self._dev_sum / self._dev_n * float(t.opts["estimate"] or 0)  # type: ignore[index]

    # ---- dispatch ------------------------------------------------------------------------
    def _plan_turn(self, d: Decisions) -> bool:
        """Plan if something changed, dispatch what the plan has ready; True when the usual
        queues hold nothing (the caller's usual fill has nothing to do)."""
        if self.plan_dropped is not None:
            return False
        n = len(self.ready) + self._nlower + self.nshaped
        replanned = False
        if n > self._plan_n or self._plan_stale:
            fresh = self._absorb()
            if fresh or (self._plan_stale and self._nplan and self._replan_due()):
                self._replan(fresh)
                replanned = True
                self._plan_stale = False
            elif not self._nplan:
                self._plan_stale = False
        if self._nplan:
            dirty = self._dirty
            if replanned:
                names = list(self._plans)
            else:
                names = [x for x in dirty if x in self._plans]
            for name in names:
                a = self.agents.get(name)
                if a is not None and not a.draining:
                    self._plan_fill(a, d)
            if not (self.ready or self._lower or self.nshaped or self.placed):
                dirty.clear()
        self._plan_n = len(self.ready) + self._nlower + self.nshaped
        return not (self.ready or self._lower or self.nshaped or self.placed)

    def _replan_due(self) -> bool:
        """Agents joined or left: plan again at once if one that left held planned tasks,
        else at most once per ``REPLAN_GAP`` of the plan's span (the agents of an allocation
        trickle in: a plan for each would cost a plan each)."""
        agents = self.agents
        for name in self._plans:  # one that left holds planned tasks: at once
            a = agents.get(name)
            if a is None or a.draining:
                return True
        span = self._plan_h - self._plan_at
        return self.clock() - self._plan_at >= max(1.0, REPLAN_GAP * span)

    def _plan_fill(self, a: AgentState, d: Decisions) -> None:
        """Send ``a`` its planned tasks that fit now, in order (module docstring)."""
        q = self._plans.get(a.name)
        if not q:
            return
        tasks, ends = self.tasks, self._plan_end
        now = -1.0
        free_c = min(a.window, a.slots - a.held) - a.inflight
        free_g = a.gpus - a.gpus_used
        while q:
            t = tasks.get(q[0])
            if t is None or t.state != QUEUED:
                q.popleft()
                self._nplan -= 1
                continue
            need = t.need
            c, g = (t.cores, 0) if need is None else (need.cores, need.gpus)
            if c > free_c or g > free_g or (need is not None and not self._ends_ok(a, need)):
                if len(q) > 1:
                    self._backfill(a, q, c, g, free_c, free_g, d)
                break
            q.popleft()
            self._nplan -= 1
            self._send_planned(a, t, d)
            if now < 0:
                now = self.clock()
            ends[t.tid] = now + float(t.opts["estimate"] or 0)  # type: ignore[index]
            free_c -= c
            free_g -= g
        if not q:
            del self._plans[a.name]

    def _send_planned(self, a: AgentState, t: Task, d: Decisions) -> None:
        if t.tid == self.resv_tid:
            self._unreserve()
        if t.need is not None:
            self._take_shaped(a, t, d)
        else:
            self._take(a, t, d)

    def _backfill(self, a: AgentState, q: deque[int], c: int, g: int, free_c: int,
                  free_g: int, d: Decisions) -> None:
        """The head of ``a``'s plan waits for room: send later planned tasks that fit now
        and, by the estimates, end before it could start (EASY backfilling)."""
        tasks, ends = self.tasks, self._plan_end
        now = self.clock()
        rel = []
        for tid in a.running:
            t = tasks.get(tid)
            if t is None:
                continue
            e = ends.get(tid, INF)
            e = now + self._left(t, e, now) if e < INF else e
            if t.alloc is not None:
                rel.append((e, t.alloc[0][1], t.alloc[0][2]))
            else:
                rel.append((e, t.cores, 0))
        rel.sort()
        shadow, fc, fg = INF, free_c, free_g
        for e, rc, rg in rel:
            fc += rc
            fg += rg
            if fc >= c and fg >= g:
                shadow = e
                break
        if shadow <= now:
            return
        i, n = 1, min(len(q), BACKFILL_SCAN + 1)
        while i < n and free_c > 0:
            t = tasks.get(q[i])
            if t is None or t.state != QUEUED:
                i += 1
                continue
            need = t.need
            tc, tg = (t.cores, 0) if need is None else (need.cores, need.gpus)
            est = float(t.opts["estimate"] or 0)  # type: ignore[index]
            if tc <= free_c and tg <= free_g and now + est <= shadow and (
                    need is None or self._ends_ok(a, need)):
                del q[i]
                n -= 1
                self._nplan -= 1
                self._send_planned(a, t, d)
                ends[t.tid] = now + est
                free_c -= tc
                free_g -= tg
                continue
            i += 1
