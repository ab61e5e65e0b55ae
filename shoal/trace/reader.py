"""Reading a trace file (format: :mod:`shoal.trace.store`) into plain records."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack

from shoal.trace.store import (
    _CMD,
    AGENT_JOIN,
    AGENT_LEAVE,
    ATTEMPT,
    CLIENT_JOIN,
    CLIENT_LEAVE,
    DISPATCH,
    END,
    FUNCS,
    HOSTS,
    RECEIVED,
    RESULTS,
    REVOKED,
    STATUS_NAMES,
    SUBMIT,
    SUBMITTED,
    UNFINISHED,
    VERSION,
    TraceError,
    _note,
    _program,
    _requests,
    unpack_times,
)

KIND_NAMES = {0: "py", 1: "chunk", 2: "cmd"}


class Attempt(NamedTuple):
    """One attempt of one task (attempt 0: the task was resolved without being dispatched).
    Times are Unix seconds, None where not known (e.g. ``started`` of a task lost before it
    started, every agent time of an attempt closed by the head)."""

    tid: int
    attempt: int
    status: str          # ok, error, cancelled, depfail, lost, timeout, returned, revoked,
                         # unfinished (see shoal.trace.store)
    owner: int | None    # the client's number
    kind: str            # py, chunk, cmd
    name: str            # function "module.qualname" (or "fn#ID" when unknown), command program
    cores: int           # per task (per rank for MPI)
    gpus: int            # per task (per rank for MPI)
    ranks: int           # MPI ranks (0: not an MPI task)
    agent: str | None    # the agent's name (None: never dispatched)
    node: str | None     # that agent's node
    submitted: float
    dispatched: float | None
    launched: float | None
    started: float | None
    ended: float | None
    received: float      # the head got the result (or closed the attempt)
    cpus: list[int] | None    # CPU ids the agent bound it to
    gpu_ids: list[str] | None  # GPU ids the agent gave it
    worker: int | None   # the agent's worker index (Python tasks)
    hosts: list[Any] | None   # MPI: [[node, ranks, cores per rank], ...]
    note: str | None     # why it failed; "exit N" for a command that exited non-zero

    @property
    def failed(self) -> bool:
        """The attempt failed: an error, a loss, a time-out, a failed dependency, given up
        by the head (revoked), a command's non-zero exit. Cancelled, handed back (returned)
        and unfinished attempts did not fail."""
        if self.status == "ok":
            return (self.note or "").startswith("exit ")
        return self.status not in ("cancelled", "returned", "unfinished")

    @property
    def core_count(self) -> int:
        """Cores it held: cores x ranks for an MPI task."""
        return self.cores * max(1, self.ranks)


@dataclass
class AgentSpan:
    """An agent while it was part of the run."""

    num: int
    name: str
    node: str
    slots: int
    gpus: int
    memory: int
    host: str
    joined: float
    left: float | None = None   # None: still there when the trace ends
    reason: str | None = None
    lost: bool = False


@dataclass
class Trace:
    """One head run of a trace file."""

    path: str
    run: int                        # 1-based, in the file
    runs: int                       # runs in the file
    header: dict[str, Any]
    attempts: list[Attempt] = field(default_factory=list)
    agents: list[AgentSpan] = field(default_factory=list)
    clients: dict[int, dict[str, Any]] = field(default_factory=dict)
    ended: float | None = None      # the head's END record (None: killed, or still running)
    stats: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False         # the file ends in the middle of a record


def read(path: str | os.PathLike[str], run: int = -1) -> Trace:
    """The run ``run`` (1-based; negative counts from the end: -1 is the last) of the trace
    file at ``path``. Raises :class:`TraceError` (one line) for a missing file, a file that
    is not a trace, or a run it does not have."""
    path = os.fspath(path)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise TraceError(f"cannot read trace {path!r}: {exc.strerror}") from None
    runs: list[tuple[dict[str, Any], list[Any]]] = []
    truncated = False
    with fh:
        unpacker = msgpack.Unpacker(fh, raw=False, strict_map_key=False, use_list=True,
                                    max_buffer_size=1 << 30)
        try:
            for obj in unpacker:
                if isinstance(obj, dict) and "shoal_trace" in obj:
                    version = obj["shoal_trace"]
                    if not isinstance(version, int) or version > VERSION:
                        raise TraceError(f"trace {path!r} has format {version!r}, newer than "
                                         f"this shoal reads ({VERSION})")
                    runs.append((obj, []))
                elif isinstance(obj, list) and runs:
                    runs[-1][1].append(obj)
                else:
                    raise TraceError(f"{path!r} is not a shoal trace (no trace header at its "
                                     "start)" if not runs else
                                     f"trace {path!r}: an object that is not a record batch")
            truncated = unpacker.tell() < os.fstat(fh.fileno()).st_size  # a torn last write
        except (ValueError, msgpack.UnpackException) as exc:
            if not runs:
                raise TraceError(f"{path!r} is not a shoal trace ({exc})") from None
            truncated = True  # a torn write at the end of a killed head's run
    if not runs:
        raise TraceError(f"{path!r} is not a shoal trace (empty)")
    index = run - 1 if run > 0 else len(runs) + run
    if not 0 <= index < len(runs):
        raise TraceError(f"trace {path!r} has {len(runs)} run{'s' * (len(runs) != 1)}, "
                         f"no run {run}")
    header, batches = runs[index]
    trace = Trace(path, index + 1, len(runs), header,
                  truncated=truncated and index == len(runs) - 1)
    _fill(trace, batches)
    return trace


def _unpack_body(body: Any) -> list[Any]:
    """A message recorded as received (format 4); [] if it cannot be read."""
    try:
        msg = msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True)
    except (TypeError, ValueError, msgpack.UnpackException):
        return []
    return msg if isinstance(msg, list) else []


def _fill(trace: Trace, batches: list[list[Any]]) -> None:
    funcs: dict[int, str] = {}
    agents: dict[int, AgentSpan] = {}
    tasks: dict[int, tuple[Any, ...]] = {}   # tid -> (submitted, owner, kind, what, cores, request)
    hosts: dict[tuple[int, int], Any] = {}   # (tid, attempt) -> MPI hosts
    # (tid, attempt, status, agent, dispatched, received, agent_times, note)
    rows: list[tuple[Any, ...]] = []
    # format 4: the head keeps no open attempts; they are rebuilt here, in record order:
    # tid -> (dispatched, agent, attempt) from its DISPATCH until a result or close
    v4 = isinstance(trace.header.get("shoal_trace"), int) and trace.header["shoal_trace"] >= 4
    opened: dict[int, tuple[float, int, Any]] = {}

    def results(t: float, num: int, tids: list[int], statuses: Any, attempts: Any, sent: Any,
                times: Any, infos: Any) -> None:
        n = len(tids)
        if not isinstance(times, list):  # format 2 on: the agent's packed blob
            times = unpack_times(times, n)
        if not isinstance(statuses, list):  # format 3: one value for all
            statuses = [statuses] * n
        if not isinstance(attempts, list):
            attempts = [attempts] * n
        if sent is not None:  # formats 1-3: the head kept the open attempts
            for tid, attempt, status, disp, tr, info in zip(
                    tids, attempts, statuses, sent, times, infos or [None] * n, strict=True):
                rows.append((tid, attempt, status, num, disp, t, tr,
                             _note(info) if info else None))
            return
        for tid, attempt, status, tr, info in zip(tids, attempts, statuses, times,
                                                  infos or [None] * n, strict=True):
            o = opened.get(tid)  # the core's rule: the open attempt, from its agent
            if o is None or o[1] != num or (attempt is not None and attempt != o[2]):
                continue  # stale: the head dropped it
            del opened[tid]
            rows.append((tid, o[2] if attempt is None else attempt, status, num, o[0], t, tr,
                         _note(info) if info else None))

    for batch in batches:
        for rec in batch:
            if not isinstance(rec, list) or not rec:
                continue
            tag = rec[0]
            if tag == RECEIVED:
                _, t, num, body = rec[:4]
                msg = _unpack_body(body)
                items = msg[1] if len(msg) > 1 and isinstance(msg[1], list) else []
                if not items:
                    continue
                blob = msg[2] if len(msg) > 2 else None
                times = (blob if blob is not None else
                         [it[5] if len(it) > 5 else None for it in items])
                results(t, num, [it[0] for it in items], [it[1] for it in items],
                        [it[3] if len(it) > 3 else None for it in items], None, times,
                        [it[4] if len(it) > 4 else None for it in items])
            elif tag == DISPATCH:
                _, t, num, tids, attempts = rec[:5]
                if not isinstance(attempts, list):
                    attempts = [attempts] * len(tids)
                for tid, attempt in zip(tids, attempts, strict=True):
                    o = opened.get(tid)
                    if o is not None:  # dispatched again without word of the last attempt
                        rows.append((tid, o[2], REVOKED, o[1], o[0], t, None,
                                     "given up by the head"))
                    opened[tid] = (t, num, attempt)
            elif tag == RESULTS:
                _, t, num, tids, statuses, attempts, sent, times, infos = rec[:9]
                results(t, num, tids, statuses, attempts, sent, times, infos)
            elif tag == ATTEMPT:
                if v4 and rec[2] != 0 and rec[5] is None:  # closes the open attempt
                    o = opened.pop(rec[1], None)          # (none open: dropped)
                    if o is not None:
                        rows.append((rec[1], o[2], rec[3], rec[4] or o[1], o[0], *rec[6:9]))
                else:  # attempt 0 (resolved without running), or given whole
                    if v4 and rec[2] != 0:
                        opened.pop(rec[1], None)
                    rows.append(tuple(rec[1:9]))
            elif tag == SUBMITTED:
                _, t, owner, body = rec[:4]
                msg = _unpack_body(body)
                if len(msg) > 4 and isinstance(msg[4], dict):
                    funcs.update(msg[4])
                for spec in msg[1] if len(msg) > 1 and isinstance(msg[1], list) else ():
                    n = len(spec)
                    kind = spec[1] if n > 1 else None
                    opts = spec[8] if n > 8 else None
                    tasks[spec[0]] = (
                        t, owner if owner is not None else (spec[10] if n > 10 else None), kind,
                        _program(spec) if kind == _CMD else (spec[2] if n > 2 else None),
                        spec[5] if n > 5 else None, _requests([opts])[0] if opts else None)
            elif tag == SUBMIT:
                _, t, tids, owners, kinds, whats, cores, requests = rec[:8]
                n = len(tids)
                cols = [c if isinstance(c, list) else [c] * n
                        for c in (owners, kinds, whats, cores, requests)]
                for tid, *fields in zip(tids, *cols, strict=True):
                    tasks[tid] = (t, *fields)
            elif tag == HOSTS:
                hosts[(rec[1], rec[2])] = rec[3]
            elif tag == AGENT_JOIN:
                _, t, num, name, node, slots, gpus, memory, host, _pid = rec[:10]
                span = AgentSpan(num, name, node, slots, gpus, memory, host, t)
                agents[num] = span
                trace.agents.append(span)
            elif tag == AGENT_LEAVE:
                span = agents.get(rec[2])
                if span is not None and span.left is None:
                    span.left, span.reason, span.lost = rec[1], rec[3], bool(rec[4])
            elif tag == FUNCS:
                funcs.update(rec[1])
            elif tag == CLIENT_JOIN:
                trace.clients[rec[2]] = {"name": rec[3], "host": rec[4], "pid": rec[5],
                                         "joined": rec[1], "left": None}
            elif tag == CLIENT_LEAVE:
                c = trace.clients.get(rec[2])
                if c is not None:
                    c["left"] = rec[1]
            elif tag == END:
                trace.ended, trace.stats = rec[1], rec[2] or {}
                for tid, (disp, num, attempt) in opened.items():  # running when the head stopped
                    rows.append((tid, attempt, UNFINISHED, num, disp, rec[1], None,
                                 "the head stopped"))
                opened.clear()
    out = trace.attempts
    nothing = (None, None, None, None, None, None)
    unknown = (None, None, None, "?", 1, None)
    for tid, attempt, status, num, disp, rec, times, note in rows:
        sub, owner, kind, what, cores, request = tasks.get(tid, unknown)
        span = agents.get(num)
        name = (funcs.get(what) or f"fn#{what:x}") if isinstance(what, int) else str(what)
        lau, sta, end, cpus, gids, worker = (times or nothing)[:6]
        gpus, ranks = request[:2] if request else (0, 0)
        out.append(Attempt(tid, attempt, STATUS_NAMES.get(status, str(status)), owner,
                           KIND_NAMES.get(kind, str(kind)), name, cores or 1, gpus or 0,
                           ranks or 0, span.name if span else None, span.node if span else None,
                           rec if sub is None else sub, disp, lau, sta, end, rec, cpus, gids,
                           worker, hosts.get((tid, attempt)), note))
