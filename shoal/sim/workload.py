"""Simulation workloads: a file a user edits (TOML or JSON), read into a :class:`Workload`.

A workload names the machine (agents: how many, cores, GPUs), the head's and agents'
rules (prefetch, message latency, result batching, launch cost) and groups of tasks::

    name = "rp-256"
    seed = 1                    # the random draws (sizes, durations, order)
    order = "shuffle"           # or "in-order": groups one after the other

    [agents]
    count = 256                 # or a list: one run per count (a sweep)
    cores = 168
    gpus = 6

    [head]
    prefetch = 1                # as `shoal head --prefetch`: window = cores x (1 + prefetch)
    latency_s = 0.0001          # one way, head <-> agent
    cost = "measured"           # the head's turns last the CPU time its core really took;
                                # "zero": an infinitely fast head
    results = "batch"           # the agent's batching (2 ms, 256 a message); "single": one
                                # message per result
    policy = "fifo"             # "big-first": SchedulerCore(big_first=True); "plan": and
                                # plan=True (tasks with estimates: shoal.head.planning)

    [agent]
    launch_s = 0.0              # from a task's start at the agent to its program running

    [[tasks]]
    count_per_agent = 28.828125 # or count = N (absolute), or count_per_core = N
    cores = [1, 9]              # an int, or [low, high]: uniform integers
    gpus = 0                    # same
    duration_s = [480, 600]     # a number, or [low, high]: uniform reals
    estimate = false            # true: each task states its run time (opts["estimate"]),
                                # which the head orders by (longest first); the agents
                                # still run the true durations
    estimate_error = 0.0        # the stated time is off by up to this share, uniform (0.2:
                                # +-20%)

Every key is checked: a bad one is a :class:`WorkloadError` naming the file and the key.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any

import tomllib


class WorkloadError(ValueError):
    """A workload file that cannot be read; one line naming the file and the key."""


@dataclass(frozen=True)
class TaskGroup:
    """One ``[[tasks]]`` table: how many tasks and the ranges they are drawn from."""

    count: float = 0                 # absolute (0: use a per-agent or per-core count)
    count_per_agent: float = 0
    count_per_core: float = 0
    cores: tuple[int, int] = (1, 1)
    gpus: tuple[int, int] = (0, 0)
    ranks: int = 0                   # MPI ranks (0: not an MPI task); cores/gpus per rank
    nodes: int = 0
    duration_s: tuple[float, float] = (1.0, 1.0)
    estimate: bool = False           # tasks state their run time (opts["estimate"])
    estimate_error: float = 0.0      # ... off by up to this share (uniform)

    def total(self, agents: int, cores: int) -> int:
        """How many tasks this group has on ``agents`` agents of ``cores`` cores."""
        if self.count:
            return int(round(self.count))
        if self.count_per_agent:
            return int(round(self.count_per_agent * agents))
        return int(round(self.count_per_core * agents * cores))


@dataclass(frozen=True)
class Workload:
    """What to simulate (see the module docstring for the file format)."""

    name: str = "workload"
    description: str = ""
    agents: int = 1
    sweep: tuple[int, ...] = ()      # more agent counts: one run each (agents.count a list)
    cores: int = 1
    gpus: int = 0
    prefetch: int = 1
    latency_s: float = 0.0
    cost: str = "measured"           # "measured" | "zero"
    results: str = "batch"           # "batch" | "single"
    policy: str = "fifo"             # "fifo" | "big-first" (SchedulerCore's big_first) |
                                     # "plan" (big_first and plan: shoal.head.planning)
    launch_s: float = 0.0
    seed: int = 1
    order: str = "shuffle"           # "shuffle" | "in-order"
    submit_batch: int = 10_000       # tasks per SUBMIT message of the client
    groups: tuple[TaskGroup, ...] = field(default_factory=tuple)
    path: str = ""

    def with_(self, **changes: Any) -> Workload:
        """A copy with some fields changed (command-line overrides)."""
        bad = [k for k in changes if k not in self.__dataclass_fields__]
        if bad:
            raise WorkloadError(f"workload {self.name}: no setting {bad[0]!r}")
        return replace(self, **changes)


def _range(where: str, v: Any, kind: type) -> tuple[Any, Any]:
    num = (int,) if kind is int else (int, float)
    if isinstance(v, bool):
        raise WorkloadError(f"{where}: expected a number or [low, high], not {v!r}")
    if isinstance(v, num):
        return (kind(v), kind(v))
    if (isinstance(v, list) and len(v) == 2 and all(isinstance(x, num) and not isinstance(x, bool)
                                                    for x in v) and v[0] <= v[1]):
        return (kind(v[0]), kind(v[1]))
    what = "an integer" if kind is int else "a number"
    raise WorkloadError(f"{where}: expected {what} or [low, high] with low <= high, not {v!r}")


def _num(where: str, v: Any, kind: type, low: float) -> Any:
    num = (int,) if kind is int else (int, float)
    if isinstance(v, bool) or not isinstance(v, num) or v < low:
        what = "an integer" if kind is int else "a number"
        raise WorkloadError(f"{where}: expected {what} >= {low}, not {v!r}")
    return kind(v)


def _flag(where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise WorkloadError(f"{where}: expected true or false, not {v!r}")
    return v


def _choice(where: str, v: Any, choices: tuple[str, ...]) -> str:
    if v not in choices:
        raise WorkloadError(f"{where}: expected one of {', '.join(choices)}, not {v!r}")
    return str(v)


def _table(where: str, v: Any, keys: set[str]) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise WorkloadError(f"{where}: expected a table, not {v!r}")
    bad = sorted(set(v) - keys)
    if bad:
        raise WorkloadError(f"{where}: unknown key {bad[0]!r} (known: {', '.join(sorted(keys))})")
    return v


def parse(data: dict[str, Any], path: str = "<workload>") -> Workload:
    """A :class:`Workload` from the parsed file (``path`` names it in errors)."""
    top = _table(path, data, {"name", "description", "seed", "order", "agents", "head", "agent",
                              "tasks", "client"})
    kw: dict[str, Any] = {"path": path}
    kw["name"] = str(top.get("name") or os.path.splitext(os.path.basename(path))[0])
    kw["description"] = str(top.get("description", ""))
    kw["seed"] = _num(f"{path}: seed", top.get("seed", 1), int, 0)
    kw["order"] = _choice(f"{path}: order", top.get("order", "shuffle"), ("shuffle", "in-order"))
    ag = _table(f"{path}: [agents]", top.get("agents", {}), {"count", "cores", "gpus"})
    count = ag.get("count", 1)
    if isinstance(count, list) and count:
        counts = [_num(f"{path}: agents.count", c, int, 1) for c in count]
        kw["agents"], kw["sweep"] = counts[0], tuple(counts[1:])
    else:
        kw["agents"] = _num(f"{path}: agents.count", count, int, 1)
    kw["cores"] = _num(f"{path}: agents.cores", ag.get("cores", 1), int, 1)
    kw["gpus"] = _num(f"{path}: agents.gpus", ag.get("gpus", 0), int, 0)
    head = _table(f"{path}: [head]", top.get("head", {}),
                  {"prefetch", "latency_s", "cost", "results", "policy"})
    kw["prefetch"] = _num(f"{path}: head.prefetch", head.get("prefetch", 1), int, 0)
    kw["latency_s"] = _num(f"{path}: head.latency_s", head.get("latency_s", 0.0), float, 0)
    kw["cost"] = _choice(f"{path}: head.cost", head.get("cost", "measured"), ("measured", "zero"))
    kw["results"] = _choice(f"{path}: head.results", head.get("results", "batch"),
                            ("batch", "single"))
    kw["policy"] = _choice(f"{path}: head.policy", head.get("policy", "fifo"),
                           ("fifo", "big-first", "plan"))
    agent = _table(f"{path}: [agent]", top.get("agent", {}), {"launch_s"})
    kw["launch_s"] = _num(f"{path}: agent.launch_s", agent.get("launch_s", 0.0), float, 0)
    client = _table(f"{path}: [client]", top.get("client", {}), {"submit_batch"})
    kw["submit_batch"] = _num(f"{path}: client.submit_batch", client.get("submit_batch", 10_000),
                              int, 1)
    tasks = top.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise WorkloadError(f"{path}: expected at least one [[tasks]] table")
    groups = []
    for i, t in enumerate(tasks, 1):
        w = f"{path}: tasks #{i}"
        t = _table(w, t, {"count", "count_per_agent", "count_per_core", "cores", "gpus", "ranks",
                          "nodes", "duration_s", "estimate", "estimate_error"})
        given = [k for k in ("count", "count_per_agent", "count_per_core") if k in t]
        if len(given) != 1:
            raise WorkloadError(f"{w}: give exactly one of count, count_per_agent, count_per_core")
        g = TaskGroup(**{given[0]: _num(f"{w}.{given[0]}", t[given[0]], float, 0)},
                      cores=_range(f"{w}.cores", t.get("cores", 1), int),
                      gpus=_range(f"{w}.gpus", t.get("gpus", 0), int),
                      ranks=_num(f"{w}.ranks", t.get("ranks", 0), int, 0),
                      nodes=_num(f"{w}.nodes", t.get("nodes", 0), int, 0),
                      duration_s=_range(f"{w}.duration_s", t.get("duration_s", 1.0), float),
                      estimate=_flag(f"{w}.estimate", t.get("estimate", False)),
                      estimate_error=_num(f"{w}.estimate_error", t.get("estimate_error", 0.0),
                                          float, 0))
        if g.cores[0] < 1:
            raise WorkloadError(f"{w}.cores: at least 1, not {g.cores[0]}")
        if g.duration_s[0] < 0:
            raise WorkloadError(f"{w}.duration_s: not negative, not {g.duration_s[0]}")
        groups.append(g)
    kw["groups"] = tuple(groups)
    return Workload(**kw)


def load(path: str | os.PathLike[str]) -> Workload:
    """Read a workload file: ``.json`` as JSON, anything else as TOML."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {path!r}: {exc.strerror}") from None
    try:
        data = json.loads(raw) if path.endswith(".json") else tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"workload {path!r}: {str(exc).splitlines()[0]}") from None
    return parse(data, path)
