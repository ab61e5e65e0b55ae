"""The trace store: every attempt of every task, written by the head, read by reports.

The head keeps a trace only when started with ``--trace FILE``; it then says so in
WELCOME (``info["trace"]``) and only then do agents attach their times to results (the
RESULT item's 6th field, see :mod:`shoal.transport.protocol`). Off, nothing here runs.

Where each fact is known, it is taken (DESIGN.md):
  head   submitted (SUBMIT received), dispatched (TASKS about to be sent), received (RESULTS
         received), the agent, the request (cores, GPUs, ranks, MPI hosts), the status
  agent  launched (handed to a worker / posix_spawn called), started (the worker began the
         call / the process exists), ended (the call returned / the process was reaped), the
         CPU ids, GPU ids and worker index it gave the task
All times are Unix seconds (``time.time()`` of the host that took them: across hosts the
agent's times are as good as the clocks' agreement; from format 4 the agent and its
workers take theirs on the host's monotonic clock and each RESULTS blob carries the offset
that makes them Unix time, :mod:`shoal.trace.columns`).

File format: a stream of msgpack objects, appended (a head on an existing trace file adds
a run). Each run starts with a header map ``{"shoal_trace": VERSION, "t", "pid", "host",
"run_id"}``; then the head appends arrays of records (one per loop turn that had something
to record), each record an array whose first element says what it is:

    [SUBMIT, t, tids, owners, kinds, whats, cores, requests]
        tasks handed to the scheduler at ``t``, one column per field: a list with one value
        per tid, or one value for all of them. owner: the client's number; kind: PY 0,
        CHUNK 1, CMD 2; what: the function id (names in FUNCS records) or a command's
        program; cores: per task (per rank for MPI); requests: nil, or per task nil or
        [gpus, ranks].
    [RESULTS, t, agent, tids, statuses, attempts, dispatched, agent_times, infos]
        the attempts whose results one RESULTS message from an agent brought, at ``t``
        (their ``received``), as columns (from format 3 statuses and attempts may be one
        value for all). agent: the agent's number (see AGENT_JOIN).
        status: protocol's (OK 0, ERR 1, CANCELLED 2, DEPFAIL 3, LOST 4, TIMEOUT 5).
        dispatched: when the head sent that attempt. agent_times: per result nil or the
        agent's [launched, started, ended, cpus, gpu_ids, worker], any of them nil where
        not known; from format 2 on this column may instead be a bin packed by the
        agent, one blob per RESULTS message stored as it came: format 2 that array,
        format 3 columns (:mod:`shoal.trace.columns`). infos: nil (no failures), or per
        result nil or the failure's info
        (``{"why": ..., "types": [...]}``, ``{"exit": N}`` for a command exiting non-zero).
        From format 4 dispatched is nil: the reader takes it from the DISPATCH record.
    [SUBMITTED, t, owner, body]                                           (format 4)
        one SUBMIT message as the head received it (its msgpack body, unopened:
        ``[SUBMIT, specs, funcs, static, names]``, see :mod:`shoal.transport.protocol`),
        at ``t``; owner: the client's number, nil for an agent's sub-tasks (their specs
        carry it). The reader takes each task's facts from the specs and the functions'
        names from ``names``. Written in place of a SUBMIT record when the body is small
        (RAW_PER_TASK bytes a task): the head then does no work per task.
    [DISPATCH, t, agent, tids, attempts]                                   (format 4)
        one TASKS message the head sent that agent at ``t``: the tasks' ids and attempt
        numbers (one value for all when they are the same). The head keeps no table of
        open attempts: the reader does (an attempt is open from its DISPATCH to its
        result, an ATTEMPT record that closes it, a new DISPATCH of the task (REVOKED:
        given up by the head) or the END record (UNFINISHED)).
    [RECEIVED, t, agent, body]                                             (format 4)
        one RESULTS message from that agent as received (``[RESULTS, items, times]``, its
        times as the agent packed them, :mod:`shoal.trace.columns`); written in place of
        a RESULTS record when small. A result counts when its attempt is open on that
        agent (the core's rule): the reader drops the rest, as the head did before.
    [ATTEMPT, tid, attempt, status, agent, dispatched, received, agent_times, note]
        one attempt the head ended itself: RETURNED / REVOKED / UNFINISHED below, LOST with
        its agent, cancelled on its agent; or attempt 0: the head resolved the task without
        running it (again): cancelled, a failed dependency, an impossible request, a hard
        placement on an agent that left (agent 0, dispatched nil). note: why. From format
        4 the head writes an attempt >= 1 (or nil) with dispatched nil: it closes the
        task's open attempt (the reader has its number, agent and dispatch time), and is
        dropped when none is open.
    [HOSTS, tid, attempt, hosts]
        where the head placed an MPI task's ranks: [[node, ranks, cores per rank], ...]
    [AGENT_JOIN, t, num, name, node, slots, gpus, memory, host, pid]
    [AGENT_LEAVE, t, num, reason, lost]
    [FUNCS, {fid: "module.qualname"}]
    [CLIENT_JOIN, t, num, name, host, pid]
    [CLIENT_LEAVE, t, num, reason]
    [END, t, {head statistics}]

Why a msgpack stream and not SQLite (the journal's store): the trace is only appended by
the head and read whole by reports, never looked up by key. The head packs each turn's
records in one C call and writes them in one ``write()`` every WRITE_EVERY_S: no
transaction, no row per task in a database. A head killed mid-write leaves a truncated
last object, which the reader drops (``truncated``).

Cost (the head's hot path with the trace on; format 4): the head records messages, not
tasks. A SUBMIT or RESULTS message goes to the trace as the bytes it arrived in (one
record per message: nothing per task), a TASKS message as its tids and attempts (two
C-level ``map``s); the head keeps no table of open attempts, and the reader rebuilds each
attempt's life from the records in order. W1 (100,000 no-op tasks, 100-300 a message)
costs the whole runtime about 26 us of CPU a task, so the trace has about 1.1 us a task
in all processes for its 5% (docs/benchmarks.md, "trace cost, next step"). A message
whose body is large for its tasks (big arguments or results) is recorded as columns
instead (SUBMIT and RESULTS records): its tasks cost far more than the trace's work.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

import msgpack

from shoal.trace.columns import unpack_columns

# 2: RESULTS' agent_times may be one blob packed by the agent, an array per item;
# 3: that blob may be columns (shoal.trace.columns); 4: messages as received (SUBMITTED,
# RECEIVED), DISPATCH records, open attempts kept by the reader. 1-3 are still read.
VERSION = 4
(ATTEMPT, AGENT_JOIN, AGENT_LEAVE, FUNCS, CLIENT_JOIN, CLIENT_LEAVE, END, SUBMIT, RESULTS,
 HOSTS, SUBMITTED, DISPATCH, RECEIVED) = range(13)
# a message is recorded as received while its body is at most this many bytes a task (plus
# RAW_SLACK: a function sent by value); a larger one as columns (no arguments or results
# copied into the trace: a task that moves that much costs more than its columns do)
RAW_PER_TASK = 256
RAW_SLACK = 4096
# statuses only the trace uses (the protocol's are 0-5)
RETURNED = 16     # handed back unstarted (drain) or requeued when its agent left in order
REVOKED = 17      # given up by the head (a share of an MPI task was lost, its owner left)
UNFINISHED = 18   # still running when the head stopped
STATUS_NAMES = {0: "ok", 1: "error", 2: "cancelled", 3: "depfail", 4: "lost", 5: "timeout",
                RETURNED: "returned", REVOKED: "revoked", UNFINISHED: "unfinished"}

# positions in the task spec (shoal.transport.protocol; not imported: the reader of a trace
# needs no runtime)
_T_KIND, _T_PAYLOAD, _T_OPTS, _T_ATTEMPT, _T_OWNER = 1, 3, 8, 9, 10
_CMD = 2
_CANCELLED, _LOST = 2, 4
_packer = msgpack.Packer(use_bin_type=True)
_packb = _packer.pack
_IOV_MAX = 1024  # buffers a writev takes (Linux's and macOS's IOV_MAX)
_first, _second, _fourth, _fifth = (itemgetter(i) for i in (0, 1, 3, 4))
_col_attempt = itemgetter(_T_ATTEMPT)
_col_owner, _col_kind, _col_fid, _col_cores, _col_opts = (itemgetter(i) for i in (10, 1, 2, 5, 8))
# Packed turns are written when this much waits or this long passed (a head killed with
# SIGKILL loses at most that much of the trace; an orderly exit loses nothing).
WRITE_BYTES = 256 << 10
WRITE_EVERY_S = 0.2


class TraceError(Exception):
    """A trace file cannot be written or read; the message is one line naming the file."""


def _program(spec: list[Any]) -> str:
    """A command's program (the first word of a shell line)."""
    payload = spec[_T_PAYLOAD]
    try:
        argv = payload["argv"]
        if len(argv) == 3 and argv[0] == "/bin/sh" and argv[1] == "-c":
            words = argv[2].split(None, 1)
            return words[0] if words else "/bin/sh"
        return argv[0]
    except (TypeError, KeyError, IndexError, AttributeError):
        return "?"


def _note(info: dict[str, Any]) -> str:
    """A failed attempt's note: "exit N" for a command that exited non-zero, else why."""
    if "exit" in info:
        return f"exit {info['exit']}"
    return str(info.get("why", ""))[:300]


def _column(values: list[Any]) -> Any:
    """One value when all are the same (a client's batch: one owner, often one function;
    a batch of results: all OK, first attempts). ``count``: C-level, and small ints and
    None compare by identity."""
    return values[0] if values.count(values[0]) == len(values) else values


class Recorder:
    """The head's side: buffers the facts of each loop turn, packs them at :meth:`flush`.

    The head calls it only when tracing, and calls the hooks that close attempts before
    the core requeues or forgets them (``live``: the core's task table, read for attempt
    numbers, agents and MPI hosts). It keeps no table of open attempts (format 4): the
    reader does.
    """

    def __init__(self, path: str, run_id: str = "",
                 clock: Callable[[], float] = time.time,
                 header: dict[str, Any] | None = None) -> None:
        """``clock``: where the record times come from (the simulator gives its virtual
        clock; the head the wall clock); ``header``: more fields for the run's header."""
        self.path = path
        self.clock = clock
        if os.path.isdir(path):
            raise TraceError(f"--trace {path!r}: a directory, not a file")
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            size = 0
        except OSError as exc:
            raise TraceError(f"--trace {path!r}: {exc.strerror}") from None
        if size:
            check_header(path)  # appending a run to a trace: never to some other file
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise TraceError(f"--trace {path!r}: cannot write: {exc.strerror}") from None
        self.live: dict[int, Any] = {}     # the core's tasks (set by the head)
        self.rows: list[Any] = []  # records; a message as received: _raw's (prefix, body)
        self._num: dict[bytes, int] = {}   # peer ident -> its number (stamped in rows)
        self._agents: set[bytes] = set()   # agents there now
        self.failed = False
        self._packed: list[bytes] = []     # packed turns not written yet
        self._nbytes = 0
        self._write_at = 0.0
        header = {"shoal_trace": VERSION, "t": self.clock(), "pid": os.getpid(),
                  "host": socket.gethostname(), "run_id": run_id, **(header or {})}
        # written with the first turn's records (the head's loop flushes at once), so a head
        # that fails to start (its address taken) adds no empty run to the file
        self._packed.append(_packb(header))

    # ---- peers ------------------------------------------------------------------------
    def joined(self, ident: bytes, role: str, num: int, info: dict[str, Any],
               res: dict[str, Any] | None) -> None:
        self._num[ident] = num
        name = ident.decode(errors="replace")
        if role == "agent" and res is not None:
            self._agents.add(ident)
            self.rows.append([AGENT_JOIN, self.clock(), num, name, res["node"],
                              int(info.get("slots", 0)), res["gpus"], res["memory"],
                              str(info.get("host", "")), info.get("pid")])
        else:
            self.rows.append([CLIENT_JOIN, self.clock(), num, name, str(info.get("host", "")),
                              info.get("pid")])

    def agent_leaving(self, ident: bytes, reason: str, lost: bool, running: Iterable[int],
                      holds: Iterable[int]) -> None:
        """An agent left or was lost, before the core hears of it: ``running``, the tasks
        it leads, end LOST (or RETURNED when it left in order); ``holds``, MPI tasks led by
        other agents with a share on it, end REVOKED. (A task the core gave it that never
        left the head has no open attempt: the reader drops its close.)"""
        self._agents.discard(ident)
        now = self.clock()
        self.rows.append([AGENT_LEAVE, now, self._num.get(ident, 0), reason, lost])
        self._close(list(running), _LOST if lost else RETURNED, now, f"agent {reason}")
        self._close(list(holds), REVOKED, now, f"an agent holding its ranks left: {reason}")
        self._num.pop(ident, None)

    def client_leaving(self, ident: bytes, num: int, reason: str) -> None:
        """A client left, before the core drops its tasks (and its tasks' sub-tasks: the
        core's rule, ``shoal.head.core.cancel_owner``): those on an agent end REVOKED, the
        rest cancelled."""
        now = self.clock()
        self.rows.append([CLIENT_LEAVE, now, self._num.pop(ident, 0), reason])
        mine = [t for t in self.live.values() if t.owner == ident or t.spec[_T_OWNER] == num]
        self.cancelled(t.tid for t in mine if t.agent is None)
        self._close([t.tid for t in mine if t.agent is not None], REVOKED, now,
                    "its client left")

    def funcs(self, names: Any) -> None:
        if isinstance(names, dict) and names:
            self.rows.append([FUNCS, names])

    # ---- tasks --------------------------------------------------------------------------
    def submitted(self, specs: list[list[Any]], body: bytes | None = None,
                  owner: int | None = None) -> None:
        """Specs the core took (padded to full length by it). ``body``: the SUBMIT message
        as received, when it holds exactly these specs (``owner``: its client's number, None
        for an agent's sub-tasks): recorded as it came while it is small (SUBMITTED), else
        one SUBMIT record of columns."""
        if not specs:
            return
        if body is not None and len(body) <= RAW_PER_TASK * len(specs) + RAW_SLACK:
            self.rows.append(_raw(SUBMITTED, self.clock(), owner, body))
            return
        if len(specs) == 1 and specs[0][_T_KIND] != _CMD and not specs[0][_T_OPTS]:
            s = specs[0]  # one plain task (a client's submit alone): no columns to build
            self.rows.append([SUBMIT, self.clock(), [s[0]], s[_T_OWNER], s[1], s[2], s[5], None])
            return
        kinds = list(map(_col_kind, specs))
        whats = list(map(_col_fid, specs))
        kind = _column(kinds)
        if kind == _CMD or (kind is kinds and _CMD in kinds):  # commands: their programs
            for i, k in enumerate(kinds):
                if k == _CMD:
                    whats[i] = _program(specs[i])
        opts = list(map(_col_opts, specs))
        requests = None
        if opts.count(None) != len(opts):  # (count: C-level, None by identity)
            requests = _requests(opts)
        self.rows.append([SUBMIT, self.clock(), list(map(_first, specs)),
                          _column(list(map(_col_owner, specs))), kind, _column(whats),
                          _column(list(map(_col_cores, specs))), requests])

    def dispatched(self, agent: bytes, specs: list[list[Any]]) -> None:
        """One TASKS message about to go to ``agent``: a DISPATCH record (tids, attempts);
        MPI tasks' hosts."""
        if not specs:
            return
        opts = list(map(_col_opts, specs))
        self.rows.append([DISPATCH, self.clock(), self._num.get(agent, 0),
                          list(map(_first, specs)), _column(list(map(_col_attempt, specs)))])
        if opts.count(None) != len(opts):  # MPI: where ranks go
            for spec, o in zip(specs, opts, strict=True):
                if o and "hosts" in o:
                    self.rows.append([HOSTS, spec[0], spec[_T_ATTEMPT], o["hosts"]])

    def results(self, agent: bytes, items: list[list[Any]], packed: Any = None,
                body: bytes | None = None) -> None:
        """RESULTS from ``agent``, before the core sees them. ``body``: the message as
        received (its times packed by the agent, ``packed``): recorded as it came while it
        is small (RECEIVED), else one RESULTS record of columns, the agent's blob stored as
        it came. Without a blob the times are item[5] (the simulator; an older agent),
        taken off the items here: the client never gets them. Stale results (an attempt
        no longer open) are kept out by the reader, which knows the open attempts."""
        if not items:
            return
        n = len(items)
        if (body is not None and len(body) <= RAW_PER_TASK * n + RAW_SLACK
                and isinstance(packed, bytes)):
            self.rows.append(_raw(RECEIVED, self.clock(), self._num.get(agent, 0), body))
            return
        if isinstance(packed, bytes):
            times: Any = packed
        elif len(items[0]) == 6 and len(set(map(len, items))) == 1:
            times = list(map(list.pop, items))
        else:
            times = [item.pop() if len(item) > 5 else None for item in items]
        infos = list(map(_fifth, items))
        self.rows.append([RESULTS, self.clock(), self._num.get(agent, 0),
                          list(map(_first, items)), _column(list(map(_second, items))),
                          _column(list(map(_fourth, items))), None, times,
                          None if infos.count(None) == n else infos])

    def resolved(self, resolve: dict[bytes, list[list[Any]]]) -> None:
        """Tasks resolved without an agent's result (agent number 0 in the item): cancelled,
        failed dependencies, impossible requests, hard placements on a departed agent."""
        now = self.clock()
        for items in resolve.values():
            if all(map(_fourth, items)):
                continue
            for item in items:
                if not item[3]:
                    payload = item[2]
                    note = (payload[:300].decode(errors="replace")
                            if item[1] and isinstance(payload, bytes) and payload else None)
                    self.rows.append([ATTEMPT, item[0], 0, item[1], 0, None, now, None, note])

    def closed(self, agent: bytes, tids: Iterable[int], status: int, why: str) -> None:
        """Attempts that ended without a result, before the core hears of it: handed back
        (RETURN) or cancelled there."""
        live = self.live
        self._close([t for t in tids if getattr(live.get(t), "agent", None) == agent], status,
                    self.clock(), why)

    def cancelled(self, tids: Iterable[int]) -> None:
        """Tasks dropped before they were dispatched (again)."""
        now = self.clock()
        self.rows.extend([ATTEMPT, tid, 0, _CANCELLED, 0, None, now, None, None] for tid in tids)

    def _close(self, tids: list[int], status: int, now: float, why: str) -> None:
        """Attempts that ended without a result, while the core still holds them (its task
        knows the agent and the attempt); the reader closes the open attempt they name."""
        live, nums = self.live, self._num
        for tid in tids:
            task = live.get(tid)
            attempt = num = None
            if task is not None:
                attempt = task.spec[_T_ATTEMPT] or None
                num = nums.get(task.agent, 0)
            self.rows.append([ATTEMPT, tid, attempt, status, num, None, now, None, why])

    # ---- writing --------------------------------------------------------------------------
    def flush(self) -> None:
        """Pack this turn's records (one msgpack array; a message recorded as received is
        not copied: its bytes are written as they came, with ``writev``); write what is
        packed when there is WRITE_BYTES of it or WRITE_EVERY_S passed since the last
        write."""
        if self.rows:
            rows, self.rows = self.rows, []
            packed = self._packed
            n = self._nbytes
            if any(type(r) is tuple for r in rows):
                packed.append(_packer.pack_array_header(len(rows)))
                for r in rows:
                    if type(r) is tuple:
                        packed.extend(r)
                        n += len(r[0]) + len(r[1])
                    else:
                        packed.append(_packb(r))
                        n += len(packed[-1])
            else:
                packed.append(_packb(rows))
                n += len(packed[-1])
            self._nbytes = n
        if self._packed and (self._nbytes >= WRITE_BYTES or time.monotonic() >= self._write_at):
            if not self.failed:
                self._write(self._packed)
            self._packed = []
            self._nbytes = 0
            self._write_at = time.monotonic() + WRITE_EVERY_S

    def due(self) -> float:
        """When packed records must be written (inf: nothing waits); the head's loop wakes
        up for it (time.monotonic())."""
        return self._write_at if self._packed else float("inf")

    def close(self, stats: dict[str, Any]) -> None:
        """Agents still there leave with the head; the END record (the reader ends the
        attempts still open there UNFINISHED); the file is closed."""
        now = self.clock()
        for ident in self._agents:  # told to shut down with the head
            self.rows.append([AGENT_LEAVE, now, self._num.get(ident, 0), "the head stopped", False])
        self.rows.append([END, now, stats])
        self._write_at = 0.0
        self.flush()
        try:
            os.close(self.fd)
        except OSError:
            pass

    def _write(self, parts: list[bytes]) -> None:
        try:
            for i in range(0, len(parts), _IOV_MAX):
                chunk = parts[i:i + _IOV_MAX]
                size = sum(map(len, chunk))
                n = os.writev(self.fd, chunk)
                if n < size:  # a short write (a full disk, a signal): the rest as one
                    data = b"".join(chunk)[n:]
                    while data:
                        data = data[os.write(self.fd, data):]
        except OSError as exc:
            # A run is worth more than its trace: go on without it.
            import logging

            logging.getLogger("shoal.head").error(
                "trace %s: cannot write (%s); the run goes on without the trace", self.path,
                exc.strerror)
            self.failed = True


def _raw(tag: int, t: float, num: int | None, body: bytes) -> tuple[bytes, bytes]:
    """A record ``[tag, t, num, body]`` packed but for the body, which stays as it came
    (flush writes both without copying the body): (the record's bytes before the body,
    the body)."""
    n = len(body)
    head = (b"\xc4" + n.to_bytes(1, "big") if n < 0x100 else
            b"\xc5" + n.to_bytes(2, "big") if n < 0x10000 else b"\xc6" + n.to_bytes(4, "big"))
    return b"\x94" + _packb([tag, t, num])[1:] + head, body  # (an array of 3 made one of 4)


def _requests(opts: list[Any]) -> list[Any]:
    """The requests column: per task nil, or [gpus, ranks] (``opts``: the specs' options)."""
    return [[o.get("gpus", 0), o.get("ranks", 0)] if o and ("gpus" in o or "ranks" in o)
            else None for o in opts]


def unpack_times(times: Any, n: int) -> list[Any]:
    """A RESULTS record's agent_times as a list of ``n`` (a blob unpacked: format 3's
    columns, :mod:`shoal.trace.columns`, or format 2's array; anything not one of ``n``
    items reads as unknown times)."""
    if isinstance(times, bytes):
        try:
            times = msgpack.unpackb(times, raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException):
            times = None
        if isinstance(times, dict):
            times = unpack_columns(times, n)
    if not isinstance(times, list) or len(times) != n:
        return [None] * n
    return times


def check_header(path: str) -> dict[str, Any]:
    """The first run's header of the trace at ``path``; TraceError if it is not a trace."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise TraceError(f"cannot read trace {path!r}: {exc.strerror}") from None
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(head)
    try:
        first = next(unpacker)
    except (StopIteration, ValueError, msgpack.UnpackException):
        first = None
    if not isinstance(first, dict) or "shoal_trace" not in first:
        raise TraceError(f"{path!r} is not a shoal trace (no trace header at its start)")
    if not isinstance(first["shoal_trace"], int) or first["shoal_trace"] > VERSION:
        raise TraceError(f"trace {path!r} has format {first['shoal_trace']!r}, newer than this "
                         f"shoal reads ({VERSION})")
    return first
