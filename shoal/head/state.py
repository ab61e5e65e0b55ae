"""The scheduler core's records: a task, an agent as the core sees it, and the decisions
an event yields (see :mod:`shoal.head.core`)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from shoal.head.need import QUEUED, Need
from shoal.transport.protocol import T_ATTEMPT, T_CORES, T_OPTS, T_OWNER, T_PLACE, TASK_LEN


class Task:
    # what a dispatch and a result read come first (the fewest cache lines per task: with a
    # million tasks in flight they are far apart in memory)
    __slots__ = ("tid", "spec", "owner", "state", "agent", "cores", "attempt", "alloc", "dependents",
                 "key", "history", "opts", "ndeps", "static", "place", "hard", "crashes", "failures",
                 "seq", "need", "est")

    def __init__(self, tid: int, spec: list[Any], owner: bytes, static: bool,
                 owner_num: int | None, seq: int = 0) -> None:
        self.tid = tid
        n = len(spec)
        if n < TASK_LEN:
            spec.extend([None] * (TASK_LEN - n))
        spec[T_ATTEMPT] = 0
        self.attempt = 0  # = spec[T_ATTEMPT] (a result is checked against it without the spec)
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
        self.seq = seq               # age, for the oldest-first order across queues
        # need: resources beyond cores (None: a plain task); alloc: what a dispatched shaped
        # task holds, ((agent, cores, gpus, memory), ...), leader first
        self.need: Need | None
        self.alloc: tuple[tuple[bytes, int, int, int], ...] | None
        self.need = self.alloc = None
        self.est: int | None = None  # LPT bucket of opts["estimate"] (need.est_bucket)
        if spec[T_PLACE]:
            name, hard = spec[T_PLACE]
            self.place = name.encode() if isinstance(name, str) else name
            self.hard = bool(hard)


@dataclass
class AgentState:
    name: bytes
    slots: int           # cores
    num: int = 0         # stamped on the results of tasks it ran
    gpus: int = 0
    memory: int = 0      # bytes (0: not counted)
    node: str = ""       # the node name launchers use (MPI hosts)
    end_time: float | None = None  # epoch seconds by which it must have left
    draining: bool = False   # leaving: gets nothing more
    want: int = 0        # cores' worth of unfinished tasks the agent wants (it says so)
    base: int = 0        # ``want`` capped by held MPI shares (placement._rewindow)
    window: int = 0      # what other tasks may fill: ``base`` less a reservation
    inflight: int = 0    # cores' worth of unfinished tasks it has
    held: int = 0        # cores of MPI tasks led by another agent (it is told nothing)
    gpus_used: int = 0
    mem_used: int = 0
    excl: int = 0        # exclusive tasks on it (then nothing else goes there)
    rv_cores: int = 0    # reserved for the holder (placement._reserve)
    rv_gpus: int = 0
    rv_mem: int = 0
    rv_strict: bool = False  # an MPI share: free cores, not credit
    running: set[int] = field(default_factory=set)
    holds: set[int] = field(default_factory=set)   # MPI tasks led elsewhere with a share here
    own: deque[int] = field(default_factory=deque)  # tasks placed on this agent, ready
    order: int = 0       # when it joined (ties in credit go to the earlier one)

    @property
    def credit(self) -> int:
        return self.window - self.inflight


class Decisions:
    """What the server must do after an event. (A plain class with slots, not a dataclass:
    one is made per event, every result of a run that gets them one at a time.)"""

    __slots__ = ("dispatch", "resolve", "revoke", "done_keys", "later")

    def __init__(self) -> None:
        # agent -> task specs to send it
        self.dispatch: dict[bytes, list[list[Any]]] = {}
        # owner -> results to deliver: [tid, status, payload, extra]
        self.resolve: dict[bytes, list[list[Any]]] = {}
        # agent -> tids to cancel there (best effort: not yet started)
        self.revoke: dict[bytes, list[int]] = {}
        # (journal key, status, payload) of resolved tasks that have a key, in order
        self.done_keys: list[tuple[str, int, bytes]] = []
        # (delay in seconds, tid): retries to requeue (``SchedulerCore.requeue``) after a delay
        self.later: list[tuple[float, int]] = []

    def send(self, agent: bytes, spec: list[Any]) -> None:
        self.dispatch.setdefault(agent, []).append(spec)

    def result(self, owner: bytes, item: list[Any]) -> None:
        self.resolve.setdefault(owner, []).append(item)

    def __bool__(self) -> bool:
        return bool(self.dispatch or self.resolve or self.revoke or self.done_keys or self.later)


def _plural_gpus(agent: AgentState) -> str:
    mem = f", {agent.memory / 2**30:.1f} GiB" if agent.memory else ""
    return f"{agent.slots} cores, {agent.gpus} GPU{'' if agent.gpus == 1 else 's'}{mem}"


def _err(message: str) -> bytes:
    # A plain-text error the client turns into an exception (ERR payloads from the head
    # are text, not pickles: the head never pickles or unpickles user data).
    return message.encode()
