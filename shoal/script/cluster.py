"""Partition the DAG into clusters, the units sent to a worker as one task.

Two algorithms:

* ``swamp``: SWAMP's root/intersection clusters. A node belongs to the cluster of the exact set
  of roots that reach it (root clusters: reached by one root; intersection clusters: by several).
* ``chains`` (default): linear clustering. Each step joins the cluster of one predecessor that is
  the current tail of its cluster, provided that the step's other predecessors are already
  waited for by that cluster; otherwise it starts a new cluster. Clusters are chains, so no
  cluster ever holds two steps that could run in parallel, and a cluster never waits for a
  dependency in its middle. SWAMP's intersection clusters, by contrast, put independent
  branches (the per-model anomalies after an ensemble mean) in one sequential unit.

:func:`simulate` replays a clustering on P workers with a per-dispatch overhead so the two can be
compared (``bench/script/bench_compile.py`` prints the comparison).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .dag import Dag


@dataclass
class Cluster:
    """A dispatch unit: its steps (in run order) and the clusters it waits for."""

    id: int
    steps: list[int]
    deps: set[int] = field(default_factory=set)


def chain_clusters(dag: Dag, cut: set[int] | frozenset[int] = frozenset()) -> list[Cluster]:
    """Linear (chain) clustering; see the module docstring. Steps in ``cut`` start a cluster
    (the runner releases those clusters itself, in script order)."""
    n = len(dag.steps)
    cluster_of = [-1] * n
    clusters: list[Cluster] = []
    continued = [False] * n  # a tail passes its cluster on to one successor only
    for v in range(n):  # step ids are a topological order
        preds = dag.preds[v]
        best = -1
        pred_clusters = {cluster_of[q] for q in preds}
        for p in [] if v in cut else sorted(preds, reverse=True):  # prefer the latest one
            c = clusters[cluster_of[p]]
            if continued[p] or c.steps[-1] != p or len(pred_clusters) - 1 > len(c.deps):
                continue
            if pred_clusters - {c.id} <= c.deps:
                best = c.id
                break
        if best < 0:
            c = Cluster(len(clusters), [v], pred_clusters)
            clusters.append(c)
        else:
            c = clusters[best]
            continued[c.steps[-1]] = True
            c.steps.append(v)
        cluster_of[v] = c.id
    return clusters


def swamp_clusters(dag: Dag) -> list[Cluster]:
    """SWAMP's root/intersection clusters: group steps by the set of roots that reach them."""
    n = len(dag.steps)
    sig = [0] * n
    root_index = 0
    for v in range(n):
        if not dag.preds[v]:
            sig[v] = 1 << root_index
            root_index += 1
        else:
            s = 0
            for p in dag.preds[v]:
                s |= sig[p]
            sig[v] = s
    by_sig: dict[int, Cluster] = {}
    cluster_of = [-1] * n
    clusters: list[Cluster] = []
    for v in range(n):
        c = by_sig.get(sig[v])
        if c is None:
            c = Cluster(len(clusters), [])
            by_sig[sig[v]] = c
            clusters.append(c)
        c.steps.append(v)
        cluster_of[v] = c.id
    for c in clusters:
        for v in c.steps:
            c.deps |= {cluster_of[p] for p in dag.preds[v]} - {c.id}
        c.steps = mrr_order(dag, c.steps)
    return clusters


def single_clusters(dag: Dag) -> list[Cluster]:
    """One step per cluster (no clustering), for comparison."""
    return [Cluster(v, [v], set(dag.preds[v])) for v in range(len(dag.steps))]


ALGORITHMS = {"chains": chain_clusters, "swamp": swamp_clusters, "none": single_clusters}


def partition(dag: Dag, algorithm: str = "chains",
              cut: set[int] | frozenset[int] = frozenset()) -> list[Cluster]:
    """Cluster ``dag`` with the named algorithm; steps in ``cut`` start a cluster (chains and
    one per step only: the caller does not combine ``cut`` with SWAMP)."""
    if algorithm == "chains":
        return chain_clusters(dag, cut)
    return ALGORITHMS[algorithm](dag)


def mrr_order(dag: Dag, members: list[int]) -> list[int]:
    """Run order inside a cluster: most-recently-ready first (a stack of ready steps).

    Steps whose predecessors lie outside the cluster count as ready at the start (the cluster
    is dispatched only when those are done). Running the step whose inputs were just produced
    keeps them in cache and frees scratch files sooner (SWAMP's policy).
    """
    inside = set(members)
    waiting = {v: len(dag.preds[v] & inside) for v in members}
    stack = [v for v in sorted(members, reverse=True) if waiting[v] == 0]
    order: list[int] = []
    while stack:
        v = stack.pop()
        order.append(v)
        for s in sorted(dag.succs[v] & inside, reverse=True):
            waiting[s] -= 1
            if waiting[s] == 0:
                stack.append(s)
    return order


def simulate(dag: Dag, clusters: list[Cluster], workers: int, cost: list[float] | None = None,
             overhead: float = 0.0) -> float:
    """Makespan of running ``clusters`` on ``workers`` workers, greedy, in dispatch order.

    ``cost`` is each step's run time (1.0 each by default); ``overhead`` is paid once per
    dispatched cluster (the round trip the clustering saves). A cluster starts when all the
    clusters it waits for have finished and a worker is free.
    """
    cost = cost or [1.0] * len(dag.steps)
    dur = [overhead + sum(cost[v] for v in c.steps) for c in clusters]
    remaining = [len(c.deps) for c in clusters]
    dependents: list[list[int]] = [[] for _ in clusters]
    for c in clusters:
        for d in c.deps:
            dependents[d].append(c.id)
    ready_at = [0.0] * len(clusters)
    ready = [(0.0, c.id) for c in clusters if not c.deps]
    heapq.heapify(ready)
    free = [0.0] * workers
    heapq.heapify(free)
    finish = [0.0] * len(clusters)
    events: list[tuple[float, int]] = []
    done = 0

    def release() -> None:
        """The earliest running cluster finishes: its dependents may become ready."""
        t_done, did = heapq.heappop(events)
        for s in dependents[did]:
            remaining[s] -= 1
            ready_at[s] = max(ready_at[s], t_done)
            if remaining[s] == 0:
                heapq.heappush(ready, (ready_at[s], s))

    while done < len(clusters):
        if ready:
            t_ready, cid = heapq.heappop(ready)
            t_worker = heapq.heappop(free)
            start = max(t_ready, t_worker)
            # a cluster that becomes ready before this start must be considered first
            while events and events[0][0] <= start:
                release()
                if ready and ready[0][0] < t_ready:
                    heapq.heappush(ready, (t_ready, cid))
                    t_ready, cid = heapq.heappop(ready)
                    start = max(t_ready, t_worker)
            finish[cid] = start + dur[cid]
            heapq.heappush(free, finish[cid])
            heapq.heappush(events, (finish[cid], cid))
            done += 1
        else:
            release()
    return max(finish) if finish else 0.0
