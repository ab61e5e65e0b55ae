"""What the HTML report draws, computed from a trace with numpy: series binned in time,
slot lanes, histograms. Nothing here depends on the number of tasks once computed: a
100,000-task run gives arrays of a few hundred bins, so the page stays small and draws
fast (see :mod:`shoal.trace.html`).

Times are seconds from the start of the run's window (the first task submitted, as in
:func:`shoal.trace.summary`); values are time-weighted means over each bin, so a bin's
"busy cores" is the busy core-seconds in it divided by its width.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shoal.trace.reader import Attempt, Trace

TIME_BINS = 400        # bins of the utilization, queue and timeline-image series
FAIL_BINS = 80         # bins of the failures-over-time bars
HIST_BINS = 40         # log-spaced bins of the setup and run time histograms
TOP_NAMES = 8          # functions/commands drawn apart in the histograms (the rest: "other")
GANTT_DETAIL = 10_000  # at most this many attempts are drawn one bar each ...
GANTT_ROWS = 400       # ... on at most this many rows; past either, busy fraction per bin


def level(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray,
          weights: np.ndarray | float = 1.0, rows: np.ndarray | None = None,
          nrows: int = 1) -> np.ndarray:
    """Time-weighted mean, per bin of the uniform ``edges``, of the sum of ``weights`` of
    the intervals [start, end) open in it; one row per value of ``rows`` (shape (nrows,
    nbins)). Intervals are clipped to the edges; empty ones count nothing. O(n) with
    numpy: partial first and last bins added directly, whole bins between them through a
    running sum of a difference array."""
    nb = len(edges) - 1
    t0, width = float(edges[0]), float(edges[1] - edges[0])
    s = np.clip(starts, edges[0], edges[-1])
    e = np.clip(ends, edges[0], edges[-1])
    w = np.broadcast_to(np.asarray(weights, dtype=float), s.shape)
    r = np.zeros(s.shape, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    ok = e > s
    s, e, w, r = s[ok], e[ok], w[ok], r[ok]
    fs, fe = (s - t0) / width, (e - t0) / width  # in bin units
    i0 = np.minimum(fs.astype(np.int64), nb - 1)
    i1 = np.minimum(fe.astype(np.int64), nb)
    cols = nb + 1
    size = nrows * cols
    same = i0 == i1
    part = np.zeros(size)  # (bincount of nothing is int: add into floats)
    part += np.bincount(r[same] * cols + i0[same], (fe - fs)[same] * w[same], size)
    d = ~same
    rd, wd = r[d] * cols, w[d]
    part += np.bincount(rd + i0[d], (i0[d] + 1 - fs[d]) * wd, size)
    part += np.bincount(rd + i1[d], (fe[d] - i1[d]) * wd, size)
    diff = np.zeros(size)
    diff += np.bincount(rd + i0[d] + 1, wd, size)
    diff -= np.bincount(rd + i1[d], wd, size)
    out = part.reshape(nrows, cols) + np.cumsum(diff.reshape(nrows, cols), axis=1)
    return out[:, :nb]


def assign_lanes(groups: Sequence[Any], starts: Sequence[float],
                 ends: Sequence[float]) -> tuple[list[int], dict[Any, int]]:
    """A lane per interval such that intervals of one group (an agent) on one lane never
    overlap, using the lowest free lane (interval partitioning: as many lanes as the most
    intervals open at once, i.e. the agent's slots, plus one per nested task that ran in
    a waiting task's worker). Returns (lane of each interval, lanes per group)."""
    lane = [0] * len(starts)
    by: dict[Any, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by[g].append(i)
    counts: dict[Any, int] = {}
    for g, idx in by.items():
        idx.sort(key=starts.__getitem__)
        busy: list[tuple[float, int]] = []   # (end, lane)
        free: list[int] = []
        n = 0
        for i in idx:
            s = starts[i]
            while busy and busy[0][0] <= s:
                heapq.heappush(free, heapq.heappop(busy)[1])
            if free:
                k = heapq.heappop(free)
            else:
                k, n = n, n + 1
            lane[i] = k
            heapq.heappush(busy, (ends[i], k))
        counts[g] = n
    return lane, counts


@dataclass
class Gantt:
    """The timeline of slots: bars (``bars`` set) or busy fraction per row and bin
    (``image`` set, percent as uint8)."""

    rows: list[str]                         # row labels, bottom to top
    row_agent: list[str]                    # each row's agent (or agent group)
    unit: str                               # "slot", "agent", "agents"
    bars: dict[str, list[Any]] | None = None
    image: np.ndarray | None = None
    bin_s: float = 0.0
    shown: int = 0                          # attempts drawn (bars) or binned (image)


@dataclass
class Hist:
    """Log-spaced histogram per function/command name (top names, then "other")."""

    edges: np.ndarray
    counts: dict[str, np.ndarray]
    n: dict[str, int]
    log: bool = True                        # log-spaced bins (values span 20x or more)


@dataclass
class Series:
    """Everything the report draws."""

    t0: float
    span: float
    edges: np.ndarray                       # TIME_BINS + 1 edges, seconds from t0
    busy_cores: np.ndarray
    slots: np.ndarray
    busy_gpus: np.ndarray | None
    gpu_slots: np.ndarray | None
    queue: dict[str, np.ndarray]            # head, agents, running
    gantt: Gantt | None
    setup: Hist | None
    run: Hist | None
    fail_edges: np.ndarray
    failures: dict[str, np.ndarray]         # category -> failed attempts per bin
    by_name: list[dict[str, Any]] = field(default_factory=list)
    retried: list[dict[str, Any]] = field(default_factory=list)
    retried_total: int = 0


def _arr(values: Any) -> np.ndarray:
    return np.fromiter(((math.nan if v is None else v) for v in values), dtype=float)


def _fail_kind(a: Attempt) -> str:
    return "exit != 0" if a.status == "ok" else a.status


def series(trace: Trace, s: dict[str, Any]) -> Series | None:
    """The report's series for ``trace`` whose summary is ``s`` (None when it has no
    attempt: nothing to draw)."""
    atts = trace.attempts
    if not atts:
        return None
    t0, t1 = s["window"]
    span = max(t1 - t0, 1e-6)
    edges = np.linspace(0.0, span, TIME_BINS + 1)
    sub = _arr(a.submitted for a in atts) - t0
    disp = _arr(a.dispatched for a in atts) - t0
    sta = _arr(a.started for a in atts) - t0
    end = _arr(a.ended for a in atts) - t0
    rec = _arr(a.received for a in atts) - t0
    cores = np.fromiter((a.core_count for a in atts), dtype=float)
    gpus = np.fromiter((a.gpus * max(1, a.ranks) for a in atts), dtype=float)
    ran = ~np.isnan(sta) & ~np.isnan(end)

    busy = level(sta[ran], end[ran], edges, cores[ran])[0]
    ag = trace.agents
    joined = np.array([g.joined - t0 for g in ag], dtype=float)
    left = np.array([(g.left if g.left is not None else t1) - t0 for g in ag], dtype=float)
    slots = level(joined, left, edges, np.array([g.slots for g in ag], dtype=float))[0]
    busy_gpus = gpu_slots = None
    if s.get("gpus"):
        busy_gpus = level(sta[ran], end[ran], edges, gpus[ran])[0]
        gpu_slots = level(joined, left, edges, np.array([g.gpus for g in ag], dtype=float))[0]

    # queues: in the head from submission (or the previous attempt's end) to dispatch;
    # on an agent from dispatch to start (or to the end of an attempt that never started)
    tid = np.fromiter((a.tid for a in atts), dtype=np.int64)
    num = np.fromiter((a.attempt for a in atts), dtype=np.int64)
    order = np.lexsort((num, tid))
    again = np.zeros(len(atts), dtype=bool)  # a later attempt of the task before it
    again[1:] = (tid[order][1:] == tid[order][:-1]) & (num[order][1:] > 0)
    enter = sub.copy()
    enter[order[1:][again[1:]]] = rec[order[:-1][again[1:]]]
    leave_head = np.where(np.isnan(disp), rec, disp)
    on_agent = ~np.isnan(disp)
    agent_out = np.where(np.isnan(sta), rec, sta)
    queue = {"waiting in the head": level(enter, leave_head, edges)[0],
             "waiting on an agent": level(disp[on_agent], agent_out[on_agent], edges)[0],
             "running": level(sta[ran], end[ran], edges)[0]}

    bad = np.fromiter((a.failed for a in atts), dtype=bool)
    failed = np.flatnonzero(bad & (num > 0)).tolist()
    fail_edges = np.linspace(0.0, span, min(FAIL_BINS, max(10, len(failed))) + 1)
    failures: dict[str, np.ndarray] = {}
    kinds = Counter(_fail_kind(atts[i]) for i in failed)
    for kind, _ in kinds.most_common():
        when = np.array([rec[i] for i in failed if _fail_kind(atts[i]) == kind])
        failures[kind] = np.histogram(np.clip(when, 0, span), fail_edges)[0]

    names = [a.name for a in atts]
    setup_v = sta - disp
    run_v = end - sta
    out = Series(t0, span, edges, busy, slots, busy_gpus, gpu_slots, queue,
                 _gantt(trace, atts, sta, end, ran, cores, span),
                 _hist(names, setup_v), _hist(names, run_v), fail_edges, failures)
    out.by_name = _by_name(atts, setup_v, run_v, cores, bad)
    out.retried, out.retried_total = _retried(atts, tid, num)
    return out


def _hist(names: list[str], values: np.ndarray) -> Hist | None:
    ok = ~np.isnan(values)
    if not ok.any():
        return None
    v = values[ok]
    pos = v[v > 0]
    lo = float(pos.min()) if pos.size else 1e-6
    hi = float(v.max())
    if hi <= lo:
        lo, hi = lo / 2, lo * 2
    log = hi / lo >= 20  # else a log axis would show a few crowded ticks
    if log:
        edges = np.geomspace(lo, hi * (1 + 1e-9), HIST_BINS + 1)
    else:
        lo = min(lo, float(v.min()))
        edges = np.linspace(lo, hi + (hi - lo) * 1e-9, HIST_BINS + 1)
    keep = [n for i, n in enumerate(names) if ok[i]]
    top = [n for n, _ in Counter(keep).most_common(TOP_NAMES)]
    label = np.array([n if n in top else "other" for n in keep], dtype=object)
    counts: dict[str, np.ndarray] = {}
    n: dict[str, int] = {}
    for name in [*top, "other"]:
        sel = v[label == name]
        if sel.size:
            counts[name] = np.histogram(np.clip(sel, lo, edges[-1]), edges)[0]
            n[name] = int(sel.size)
    return Hist(edges, counts, n, log)


def _pct(v: np.ndarray) -> dict[str, float] | None:
    v = v[~np.isnan(v)]
    if not v.size:
        return None
    v = np.sort(v)
    q = [float(v[min(v.size - 1, int(p * v.size))]) for p in (0.5, 0.9)]
    return {"p50": q[0], "p90": q[1], "max": float(v[-1])}


def _by_name(atts: list[Attempt], setup_v: np.ndarray, run_v: np.ndarray,
             cores: np.ndarray, bad: np.ndarray) -> list[dict[str, Any]]:
    """Per function/command: attempts, failed attempts, run and setup percentiles (the
    same quantile rule as shoal.trace.report.percentiles), busy core-seconds."""
    idx: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, a in enumerate(atts):
        if a.attempt:
            idx[(a.name, a.kind)].append(i)
    rows = []
    for (name, kind), ii in idx.items():
        sel = np.array(ii)
        r = run_v[sel]
        rows.append({"name": name, "kind": kind, "attempts": len(ii),
                     "failed": int(bad[sel].sum()),
                     "run_s": _pct(r), "setup_s": _pct(setup_v[sel]),
                     "busy_core_s": float(np.nansum(r * cores[sel]))})
    rows.sort(key=lambda row: -row["attempts"])
    return rows


def _retried(atts: list[Attempt], tid: np.ndarray, num: np.ndarray,
             shown: int = 20) -> tuple[list[dict[str, Any]], int]:
    """Tasks run more than once: their attempts' statuses in order (the first ``shown``,
    in the order of their first attempt in the trace)."""
    ran = num > 0
    tids, first, counts = np.unique(tid[ran], return_index=True, return_counts=True)
    many = tids[counts > 1][np.argsort(first[counts > 1], kind="stable")]
    runs: dict[int, list[Attempt]] = defaultdict(list)
    for i in np.flatnonzero(ran & np.isin(tid, many[:shown])).tolist():
        runs[atts[i].tid].append(atts[i])
    out = []
    for v in (runs[t] for t in many[:shown].tolist()):
        v.sort(key=lambda a: a.attempt)
        out.append({"tid": v[0].tid, "name": v[0].name, "attempts": len(v),
                    "statuses": [f"{a.status}" + (f" ({a.note})" if a.note else "") for a in v],
                    "agents": sorted({a.agent or "-" for a in v})})
    return out, len(many)


def _gantt(trace: Trace, atts: list[Attempt], sta: np.ndarray, end: np.ndarray,
           ran: np.ndarray, cores: np.ndarray, span: float) -> Gantt | None:
    idx = [i for i in np.flatnonzero(ran).tolist() if atts[i].agent is not None]
    if not idx:
        return None
    order: dict[str, int] = {}
    slots: dict[str, int] = defaultdict(int)
    for g in trace.agents:
        order.setdefault(g.name, len(order))
        slots[g.name] = max(slots[g.name], g.slots)
    for i in idx:  # an agent without a join record (a torn trace): after the others
        order.setdefault(atts[i].agent, len(order))  # type: ignore[arg-type]
    names = sorted(order, key=order.__getitem__)
    agent = [atts[i].agent for i in idx]
    s, e = sta[idx], end[idx]
    lane, nlanes = assign_lanes(agent, s.tolist(), e.tolist())
    base: dict[str, int] = {}
    rows: list[str] = []
    row_agent: list[str] = []
    for name in names:
        base[name] = len(rows)
        k = nlanes.get(name, 0)
        rows += [f"{name} #{j}" for j in range(k)]
        row_agent += [name] * k
    row = np.array([base[a] + k for a, k in zip(agent, lane, strict=True)])  # type: ignore[index]
    if len(idx) <= GANTT_DETAIL and len(rows) <= GANTT_ROWS:
        bars = {"left": s.tolist(), "right": e.tolist(), "bottom": (row + 0.1).tolist(),
                "top": (row + 0.9).tolist(), "name": [atts[i].name for i in idx],
                "tid": [f"{atts[i].tid:#x}" for i in idx],
                "attempt": [atts[i].attempt for i in idx],
                "status": [atts[i].status + (f" ({atts[i].note})" if atts[i].note else "")
                           for i in idx],
                "failed": [atts[i].failed for i in idx],
                "agent": agent, "run": (e - s).tolist()}
        return Gantt(rows, row_agent, "slot", bars=bars, shown=len(idx))
    edges = np.linspace(0.0, span, TIME_BINS + 1)
    if len(rows) <= GANTT_ROWS:  # a row per lane: the fraction of each bin it was busy
        frac = level(s, e, edges, 1.0, row, len(rows))
        unit = "slot"
    else:  # a row per agent, or per group of agents: busy cores over their slots
        per = max(1, math.ceil(len(names) / GANTT_ROWS))
        group = {n: j // per for j, n in enumerate(names)}
        ngroups = max(group.values()) + 1
        cap = np.zeros(ngroups)
        for n in names:
            cap[group[n]] += slots.get(n, 0)
        grows = np.array([group[a] for a in agent])  # type: ignore[index]
        frac = level(s, e, edges, cores[idx], grows, ngroups) / np.maximum(cap, 1)[:, None]
        if per == 1:
            rows, row_agent, unit = list(names), list(names), "agent"
        else:
            rows = [f"{names[j * per]} .. {names[min(len(names), (j + 1) * per) - 1]}"
                    for j in range(ngroups)]
            row_agent, unit = rows, "agents"
    image = np.clip(np.rint(frac * 100), 0, 100).astype(np.uint8)
    return Gantt(rows, row_agent, unit, image=image, bin_s=span / TIME_BINS, shown=len(idx))
