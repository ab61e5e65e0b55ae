"""The discrete-event simulator: the real scheduler core, fake agents, virtual time.

What is real and what is modelled:
- the head's decisions are the real :class:`shoal.head.core.SchedulerCore`, unchanged,
  fed the events the head's server would feed it (SUBMIT, CREDIT, RESULTS). The head is a
  single server, as the real one: a *turn* takes every message that has arrived (at most
  10,000, as the server), feeds each to the core, and sends the turn's TASKS when it ends. With ``cost = "measured"`` a
  turn lasts, in virtual time, the CPU time (``time.thread_time``) the core really spent on
  it, so a head that cannot keep up shows as idle cores, not as a faster run; ``"zero"``
  models an infinitely fast head. Nothing else of the server (sockets, encoding) is counted.
- an agent is modelled on :mod:`shoal.agent.agent`'s command path: it asks once for a
  window of cores x (1 + prefetch); its queue starts tasks in order (a task that needs
  more cores than are free waits, and the ones behind it with it; one waiting for GPUs
  lets up to 64 behind it pass); a task runs ``launch_s`` + its duration; results leave
  in batches by the agent's rule (one message at once after a quiet spell, then at most
  one per 2 ms, or 256 results), or one message per result (``results = "single"``).
- messages take ``latency_s`` one way.

The trace (``trace=PATH``) is written by the head's own :class:`shoal.trace.store.Recorder`
with the virtual clock, so ``shoal trace`` reads it like a real run's.
"""

from __future__ import annotations

import gc
import heapq
import random
import time
from array import array
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from shoal.head.core import TURN_TASKS, SchedulerCore, tune_gc
from shoal.sim.workload import Workload
from shoal.transport.protocol import CMD, OK

# the agent's rules (shoal.agent.agent), in virtual time
RESULTS_DELAY_S = 0.002
RESULTS_BATCH = 256
HELD_SCAN = 64
TURN_MAX = 10_000  # messages the head's server reads in one turn before it flushes

# event kinds, in the order they run at one instant: tasks end, TASKS reach agents, agents
# take a turn (start tasks, send results), messages reach the head, the head takes a turn
_END, _TASKS, _ATURN, _HMSG, _TURN, _TURN_END = range(6)
CLIENT = b"client"


@dataclass
class SimResult:
    """What a run showed (all times virtual seconds, except the ``*_cpu_s``/``wall_s``)."""

    workload: str
    agents: int
    cores: int                 # per agent
    gpus: int                  # per agent
    tasks: int
    ok: int = 0
    failed: int = 0
    unfinished: int = 0        # never resolved (the simulation ran out of events)
    makespan_s: float = 0.0    # the last task's end
    done_s: float = 0.0        # the last result resolved at the head
    busy_core_s: float = 0.0
    busy_gpu_s: float = 0.0
    core_util: float = 0.0     # busy core-seconds / (cores x makespan)
    gpu_util: float | None = None
    queued_util: float | None = None  # cores busy while tasks waited in the head: from the
                               # first dispatch to the last (what the head controls; before
                               # it the head takes the submissions in, after it the run
                               # drains: the workload's tail)
    first_dispatch_s: float = 0.0
    last_dispatch_s: float = 0.0
    bound_s: float = 0.0       # no run can be shorter: max(work / cores, longest task)
    best_util: float = 0.0     # the utilization a run of ``bound_s`` would have
    util_profile: list[float] = field(default_factory=list)  # cores busy in each 1/20 of
                               # the makespan (where the idle time is: start, middle, drain)
    head_cpu_s: float = 0.0    # CPU time in the core's calls
    head_busy: float = 0.0     # share of the makespan the head was in a turn
    decisions: int = 0         # tasks dispatched
    decisions_per_cpu_s: float = 0.0
    results_msgs: int = 0
    turns: int = 0
    dispatch_rate: float = 0.0       # tasks dispatched per virtual second, mean
    dispatch_peak: float = 0.0       # in the busiest virtual second
    wait_mean_s: float = 0.0         # submitted -> started at the agent, mean
    wall_s: float = 0.0              # real time the simulation took
    events: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Agent:
    __slots__ = ("name", "num", "node", "slots", "gpus", "free", "free_gpus", "queue", "out",
                 "results_sent", "flush_at", "turn_at")

    def __init__(self, name: bytes, num: int, slots: int, gpus: int) -> None:
        self.name = name
        self.num = num
        self.node = name.decode()
        self.slots = slots
        self.gpus = gpus
        self.free = slots
        self.free_gpus = gpus
        self.queue: deque[list[Any]] = deque()
        self.out: list[list[Any]] = []
        self.results_sent = -1.0
        self.flush_at = -1.0      # a turn is due then for results held back (-1: none)
        self.turn_at = -1.0       # a turn is due at this instant already


class Simulator:
    """One run of a workload on ``agents`` agents (see the module docstring)."""

    def __init__(self, wl: Workload, agents: int | None = None, trace: str | None = None) -> None:
        self.wl = wl
        self.nagents = agents or wl.agents
        self.now = 0.0
        self.events: list[tuple[float, int, int, Any, Any]] = []
        self.seq = 0
        self.core = SchedulerCore(clock=self._clock, big_first=wl.policy in ("big-first", "plan"),
                                  plan=wl.policy == "plan")
        self.core.defer_fill = True  # as the server: a turn's submissions placed at its end
        self.measured = wl.cost == "measured"
        self.single = wl.results == "single"
        self.lat = wl.latency_s
        self.launch = wl.launch_s
        self.agents: dict[bytes, _Agent] = {}
        self.by_node: dict[str, _Agent] = {}
        self.inbox: list[tuple[bytes, int, Any]] = []
        self.head_busy = False
        self.turn_due = False
        self.head_cpu = 0.0
        self.head_time = 0.0
        self.turns = 0
        self.decisions = 0
        self.results_msgs = 0
        self.ok = self.failed = 0
        self.busy_core = self.busy_gpu = 0.0
        self.makespan = self.done = 0.0
        self.wait_sum = 0.0
        self.started = 0
        self.dispatch_bins: dict[int, int] = {}
        self.first_dispatch = -1.0
        self.last_dispatch = 0.0
        self.spans = (array("d"), array("d"), array("d"))  # begin, end, cores of each task
        self.dur: list[float] = []
        self.tracer = None
        self.epoch = 0.0
        if trace:
            from shoal.trace.store import Recorder

            # virtual seconds from the simulation's real start (a report shows a date)
            self.epoch = float(int(time.time()))
            self.tracer = Recorder(trace, f"sim-{wl.name}", clock=self._trace_clock,
                                   header={"simulated": True, "epoch": self.epoch})
            self.tracer.live = self.core.tasks

    def _clock(self) -> float:
        return self.now

    def _trace_clock(self) -> float:
        return self.epoch + self.now

    def _push(self, t: float, kind: int, a: Any = None, b: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, a, b))

    # ---- the workload -----------------------------------------------------------------
    def _tasks(self) -> list[list[Any]]:
        """The task specs (tid = index + 1) and their durations (``self.dur``)."""
        wl = self.wl
        rng = random.Random(wl.seed)
        erng = random.Random(wl.seed + 1)  # estimates' errors: the tasks stay the same
        specs: list[list[Any]] = []
        dur: list[float] = [0.0]
        for g in wl.groups:
            n = g.total(self.nagents, wl.cores)
            c0, c1 = g.cores
            g0, g1 = g.gpus
            d0, d1 = g.duration_s
            payload = {"argv": ["sleep", f"{d0:g}-{d1:g}"]}
            shared: dict[tuple[int, int], dict[str, Any] | None] = {}
            err = g.estimate_error
            for _ in range(n):
                cores = c0 if c0 == c1 else rng.randint(c0, c1)
                gpus = g0 if g0 == g1 else rng.randint(g0, g1)
                d = d0 if d0 == d1 else rng.uniform(d0, d1)
                if g.ranks:  # the core writes the hosts into an MPI task's opts: one each
                    opts: dict[str, Any] | None = {"ranks": g.ranks, "gpus": gpus}
                    if g.nodes:
                        opts["nodes"] = g.nodes  # type: ignore[index]
                elif g.estimate:  # the task's own statement (the run takes ``d`` anyway)
                    opts = {"gpus": gpus} if gpus else {}
                else:
                    opts = shared.get((gpus, 0), False)  # type: ignore[arg-type]
                    if opts is False:
                        opts = shared[(gpus, 0)] = {"gpus": gpus} if gpus else None
                if g.estimate:
                    opts["estimate"] = d * (1 + err * erng.uniform(-1, 1)) if err else d  # type: ignore[index]
                specs.append([0, CMD, 0, payload, None, cores, -1, None, opts, 0, None])
                dur.append(d)
        if wl.order == "shuffle":
            order = list(range(len(specs)))
            rng.shuffle(order)
            specs = [specs[i] for i in order]
            dur = [0.0] + [dur[i + 1] for i in order]
        for i, spec in enumerate(specs, 1):
            spec[0] = i
        self.dur = dur
        return specs

    # ---- running ------------------------------------------------------------------------
    def run(self) -> SimResult:
        wl = self.wl
        wall = time.perf_counter()
        specs = self._tasks()
        ntasks = len(specs)
        core, tracer = self.core, self.tracer
        window = wl.cores * (1 + wl.prefetch)
        t0 = time.thread_time()
        if tracer is not None:
            tracer.joined(CLIENT, "client", 1, {"host": "sim", "pid": 0}, None)
        for i in range(self.nagents):
            name = f"sim{i:05d}".encode()
            a = _Agent(name, i + 1, wl.cores, wl.gpus)
            self.agents[name] = a
            self.by_node[a.node] = a
            core.add_agent(name, wl.cores, a.num, gpus=wl.gpus, node=a.node)
            if tracer is not None:
                tracer.joined(name, "agent", a.num, {"slots": wl.cores, "host": "sim", "pid": 0},
                              {"node": a.node, "gpus": wl.gpus, "memory": 0, "end_time": None})
        self.head_cpu += time.thread_time() - t0
        # agents say HELLO and ask for their window; the client's batches arrive: all at 0
        for name in self.agents:
            self.inbox.append((name, 0, window))
        for i in range(0, ntasks, wl.submit_batch):
            self.inbox.append((CLIENT, 1, specs[i:i + wl.submit_batch]))
        del specs
        self.turn_due = True
        self._push(0.0, _TURN)
        gc_was = tune_gc()  # as the head's process (python -m shoal.head)
        try:
            self._loop()
        finally:
            gc.set_threshold(*gc_was)
        if tracer is not None:
            tracer.close({"agents": self.nagents, "slots": self.nagents * wl.cores,
                          "completed": core.completed, "simulated": True})
        return self._result(ntasks, time.perf_counter() - wall)

    def _loop(self) -> None:
        events, pop = self.events, heapq.heappop
        agents = self.agents
        n = 0
        while events:
            t, kind, _, a, b = pop(events)
            self.now = t
            n += 1
            if kind == _END:
                self._end(a, b)
            elif kind == _TASKS:
                ag = agents[a]
                ag.queue.extend(b)
                self._agent_turn(ag)
            elif kind == _ATURN:
                self._agent_turn(agents[a])
            elif kind == _HMSG:
                self.inbox.append(b)
                if not self.head_busy and not self.turn_due:
                    self.turn_due = True
                    self._push(t, _TURN)
            elif kind == _TURN:
                self._turn()
            else:
                self._turn_end(a)
        self.nevents = n

    # ---- the head ---------------------------------------------------------------------
    def _turn(self) -> None:
        """Every message that has arrived, fed to the core; the TASKS leave at the end."""
        self.turn_due = False
        if len(self.inbox) > TURN_MAX:  # the server reads at most this many, then flushes
            msgs, self.inbox = self.inbox[:TURN_MAX], self.inbox[TURN_MAX:]
        else:
            msgs, self.inbox = self.inbox, []
        core, tracer = self.core, self.tracer
        out: dict[bytes, list[list[Any]]] = {}
        cpu = 0.0
        clock = time.thread_time
        for i, (who, kind, body) in enumerate(msgs):
            if core.unfilled >= TURN_TASKS and not core.planning:  # as the server: place
                # these, read on next turn (a planning core plans a whole submission)
                self.inbox[:0] = msgs[i:]
                break
            if kind == 2:  # RESULTS
                if tracer is not None:
                    tracer.results(who, body)
                c = clock()
                d = core.finished(who, body)
                cpu += clock() - c
            elif kind == 1:  # SUBMIT
                c = clock()
                d = core.submit(body, CLIENT, owner_num=1)
                cpu += clock() - c
                if tracer is not None:
                    tracer.submitted(body)
            else:  # CREDIT
                c = clock()
                d = core.set_window(who, body)
                cpu += clock() - c
            self._take(d, out)
        if core.unfilled:  # the server's _flush: this turn's submissions, placed together
            c = clock()
            d = core.fill()
            cpu += clock() - c
            self._take(d, out)
        self.head_cpu += cpu
        self.turns += 1
        cost = cpu if self.measured else 0.0
        self.head_time += cost
        self.head_busy = True
        self._push(self.now + cost, _TURN_END, out)

    def _take(self, d: Any, out: dict[bytes, list[list[Any]]]) -> None:
        """A core decision's dispatches join this turn's ``out``; its results resolve."""
        for agent, specs in d.dispatch.items():
            got = out.get(agent)
            if got is None:
                out[agent] = specs
            else:
                got.extend(specs)
        if d.resolve:
            self._resolved(d.resolve)

    def _resolved(self, resolve: dict[bytes, list[list[Any]]]) -> None:
        if self.tracer is not None:
            self.tracer.resolved(resolve)
        for items in resolve.values():
            for item in items:
                if item[1] == OK:
                    self.ok += 1
                else:
                    self.failed += 1
        self.done = self.now

    def _turn_end(self, out: dict[bytes, list[list[Any]]]) -> None:
        t = self.now
        arrive = t + self.lat
        tracer = self.tracer
        n = 0
        for agent, specs in out.items():
            if tracer is not None:
                tracer.dispatched(agent, specs)
            n += len(specs)
            self._push(arrive, _TASKS, agent, specs)
        if n:
            if self.first_dispatch < 0:
                self.first_dispatch = t
            self.last_dispatch = t
            self.decisions += n
            sec = int(t)
            self.dispatch_bins[sec] = self.dispatch_bins.get(sec, 0) + n
        if tracer is not None:
            tracer.flush()
        self.head_busy = False
        if self.inbox and not self.turn_due:
            self.turn_due = True
            self._push(t, _TURN)

    # ---- the agents ---------------------------------------------------------------------
    def _agent_turn(self, a: _Agent) -> None:
        """Start what fits, in order (the agent's command path), then send results."""
        t = self.now
        if a.turn_at == t:
            a.turn_at = -1.0
        q = a.queue
        if q:
            self._start_queued(a, q, t)
        if a.out:
            self._send_results(a, t)

    def _start_queued(self, a: _Agent, q: deque[list[Any]], t: float) -> None:
        free = a.free
        skip = 0
        while skip < len(q):
            spec = q[skip]
            cores = spec[5] or 1
            opts = spec[8]
            if cores > 1 or opts:
                hosts = opts.get("hosts") if opts else None
                here = hosts[0][1] if hosts else 1
                need = min(cores * here, a.slots)
                if need > free:
                    break  # waits, in order
                g = ((opts.get("gpus") or 0) if opts else 0) * here
                if g and g > a.free_gpus:
                    skip += 1  # waits for GPUs; later ones may pass
                    if skip >= HELD_SCAN:
                        break
                    continue
                if skip:
                    del q[skip]
                else:
                    q.popleft()
                free -= need
                a.free_gpus -= g
                self._start(a, spec, need, g, hosts, t)
                continue
            if cores > free:
                break
            if skip:
                del q[skip]
            else:
                q.popleft()
            free -= 1
            self._start(a, spec, 1, 0, None, t)
        a.free = free

    def _start(self, a: _Agent, spec: list[Any], cores: int, gpus: int, hosts: Any,
               t: float) -> None:
        tid = spec[0]
        d = self.dur[tid]
        begin = t + self.launch
        end = begin + d
        total_c, total_g = cores, gpus
        if hosts:  # the other nodes' ranks (the head held their cores)
            for node, ranks, per in hosts[1:]:
                other = self.by_node[node]
                other.free -= ranks * per
                g = ((spec[8].get("gpus") or 0) * ranks)
                other.free_gpus -= g
                total_c += ranks * per
                total_g += g
        self.busy_core += total_c * d
        b, e, c = self.spans
        b.append(begin)
        e.append(end)
        c.append(total_c)
        self.busy_gpu += total_g * d
        self.wait_sum += begin
        self.started += 1
        self._push(end, _END, a, (spec, cores, gpus, hosts, t, begin))

    def _end(self, a: _Agent, info: tuple[Any, ...]) -> None:
        spec, cores, gpus, hosts, launched, begin = info
        t = self.now
        a.free += cores
        a.free_gpus += gpus
        if hosts:
            for node, ranks, per in hosts[1:]:
                other = self.by_node[node]
                other.free += ranks * per
                other.free_gpus += (spec[8].get("gpus") or 0) * ranks
                if other.queue and other.turn_at != t:
                    other.turn_at = t
                    self._push(t, _ATURN, other.name)
        if t > self.makespan:
            self.makespan = t
        item = [spec[0], OK, b"", spec[9], None]
        if self.tracer is not None:
            e = self.epoch
            item.append([e + launched, e + begin, e + t, None, None, None])
        a.out.append(item)
        if a.turn_at != t:
            a.turn_at = t
            self._push(t, _ATURN, a.name)

    def _send_results(self, a: _Agent, t: float) -> None:
        arrive = t + self.lat
        if self.single:
            for item in a.out:
                self._push(arrive, _HMSG, None, (a.name, 2, [item]))
                self.results_msgs += 1
            a.out = []
            return
        if len(a.out) >= RESULTS_BATCH or t >= a.results_sent + RESULTS_DELAY_S:  # (as ``due``)
            self._push(arrive, _HMSG, None, (a.name, 2, a.out))
            self.results_msgs += 1
            a.out = []
            a.results_sent = t
            return
        due = a.results_sent + RESULTS_DELAY_S
        if a.flush_at < t or a.flush_at > due:  # the loop wakes up to send them
            a.flush_at = due
            self._push(due, _ATURN, a.name)

    # ---- the report -------------------------------------------------------------------
    def _result(self, ntasks: int, wall: float) -> SimResult:
        wl = self.wl
        cores = self.nagents * wl.cores
        gpus = self.nagents * wl.gpus
        span = self.makespan
        longest = max(self.dur) if self.dur else 0.0
        r = SimResult(wl.name, self.nagents, wl.cores, wl.gpus, ntasks, ok=self.ok,
                      failed=self.failed, unfinished=ntasks - self.ok - self.failed,
                      makespan_s=span, done_s=self.done, busy_core_s=self.busy_core,
                      busy_gpu_s=self.busy_gpu)
        if span > 0:
            r.core_util = self.busy_core / (cores * span)
            if gpus:
                r.gpu_util = self.busy_gpu / (gpus * span)
            r.head_busy = self.head_time / span
            r.dispatch_rate = self.decisions / span
        t0, tq = max(0.0, self.first_dispatch), self.last_dispatch
        if tq > t0 and cores:
            busy = sum(c * (min(e, tq) - max(b, t0)) for b, e, c in zip(*self.spans, strict=True)
                       if b < tq and e > t0)
            r.queued_util = busy / (cores * (tq - t0))
        r.first_dispatch_s = t0
        r.last_dispatch_s = tq
        r.bound_s = max(self.busy_core / cores if cores else 0.0, longest + wl.launch_s)
        if r.bound_s > 0 and cores:
            r.best_util = self.busy_core / (cores * r.bound_s)
        if span > 0 and cores:
            r.util_profile = self._profile(span, cores)
        r.head_cpu_s = self.head_cpu
        r.decisions = self.decisions
        r.decisions_per_cpu_s = self.decisions / self.head_cpu if self.head_cpu > 0 else 0.0
        r.results_msgs = self.results_msgs
        r.turns = self.turns
        r.dispatch_peak = float(max(self.dispatch_bins.values(), default=0))
        r.wait_mean_s = self.wait_sum / self.started if self.started else 0.0
        r.wall_s = wall
        r.events = self.nevents
        r.settings = {"policy": wl.policy, "prefetch": wl.prefetch, "latency_s": wl.latency_s, "cost": wl.cost,
                      "results": wl.results, "launch_s": wl.launch_s, "seed": wl.seed,
                      "order": wl.order}
        if self.core.planning:  # shoal.head.planning: plans made, packings tried, given up
            r.settings.update(plans=self.core.plan_runs, plan_tries=self.core.plan_tries,
                              plan_dropped_s=self.core.plan_dropped)
        return r


    def _profile(self, span: float, cores: int, bins: int = 20) -> list[float]:
        """Busy share of the cores in each of ``bins`` equal slices of the makespan."""
        w = span / bins
        busy = [0.0] * bins
        for b, e, c in zip(*self.spans, strict=True):
            k = min(int(b / w), bins - 1)
            while b < e:
                edge = min(e, (k + 1) * w)
                busy[k] += c * (edge - b)
                b = edge
                k += 1
                if k >= bins:
                    break
        return [round(x / (cores * w), 4) for x in busy]


def simulate(wl: Workload, agents: int | None = None, trace: str | None = None) -> SimResult:
    """Run ``wl`` on ``agents`` agents (default: the workload's first count)."""
    return Simulator(wl, agents, trace).run()
