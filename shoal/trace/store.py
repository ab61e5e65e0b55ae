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
agent's times are as good as the clocks' agreement).

File format: a stream of msgpack objects, appended (a head on an existing trace file adds
a run). Each run starts with a header map ``{"shoal_trace": VERSION, "t", "pid", "host",
"run_id"}``; then every head loop turn that had something to record appends one array of
records, each record an array whose first element says what it is:

    [ATTEMPT, tid, attempt, status, agent, submitted, dispatched, received, agent_times,
     note, owner, kind, what, cores, request]
        one attempt of a task (attempt 0: resolved without ever being dispatched: cancelled,
        a failed dependency, an impossible request; then agent is 0 and dispatched nil).
        agent: the agent's number (see AGENT_JOIN). status: protocol's (OK 0, ERR 1,
        CANCELLED 2, DEPFAIL 3, LOST 4, TIMEOUT 5) or RETURNED / REVOKED / UNFINISHED below.
        agent_times: nil (none came: the attempt was closed by the head) or the agent's
        [launched, started, ended, cpus, gpu_ids, worker] (any may be nil). note: nil, why
        it failed, or "exit N" for a command that exited non-zero. owner: the client's
        number. kind: PY 0, CHUNK 1, CMD 2. what: the function id (names in FUNCS
        records) or a command's program. request: nil or [gpus, ranks, hosts].
    [AGENT_JOIN, t, num, name, node, slots, gpus, memory, host, pid]
    [AGENT_LEAVE, t, num, reason, lost]
    [FUNCS, {fid: "module.qualname"}]
    [CLIENT_JOIN, t, num, name, host, pid]
    [CLIENT_LEAVE, t, num, reason]
    [END, t, {head statistics}]

Why a msgpack stream and not SQLite (the journal's store): the trace is only appended by
the head and read whole by reports, never looked up by key. Per turn the head packs one
array in C and makes one ``write()``: about 0.3 us per attempt and no transaction; a head
killed mid-write leaves a truncated last object, which the reader drops (``truncated``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any

import msgpack

VERSION = 1
ATTEMPT, AGENT_JOIN, AGENT_LEAVE, FUNCS, CLIENT_JOIN, CLIENT_LEAVE, END = range(7)
# statuses only the trace uses (the protocol's are 0-5)
RETURNED = 16     # handed back unstarted (drain) or requeued when its agent left in order
REVOKED = 17      # given up by the head (a share of an MPI task was lost, its owner left)
UNFINISHED = 18   # still running when the head stopped
STATUS_NAMES = {0: "ok", 1: "error", 2: "cancelled", 3: "depfail", 4: "lost", 5: "timeout",
                RETURNED: "returned", REVOKED: "revoked", UNFINISHED: "unfinished"}

# positions in the task spec (shoal.transport.protocol; not imported: the reader of a trace
# needs no runtime)
_T_ID, _T_KIND, _T_FID, _T_PAYLOAD, _T_CORES, _T_OPTS, _T_ATTEMPT, _T_OWNER = 0, 1, 2, 3, 5, 8, 9, 10
_CMD = 2
_OK, _CANCELLED, _LOST = 0, 2, 4
_packb = msgpack.Packer(use_bin_type=True).pack
# Packed turns are written when this much waits or this long passed (a head killed with
# SIGKILL loses at most that much of the trace; an orderly exit loses nothing).
WRITE_BYTES = 256 << 10
WRITE_EVERY_S = 0.2
_first = itemgetter(0)


def _note(info: dict[str, Any]) -> str:
    """A failed attempt's note: "exit N" for a command that exited non-zero, else why."""
    if "exit" in info:
        return f"exit {info['exit']}"
    return str(info.get("why", ""))[:300]


def _request(opts: dict[str, Any]) -> list[Any] | None:
    """[gpus, ranks, hosts] of a task asking for GPUs or MPI ranks, else None."""
    if "gpus" in opts or "ranks" in opts:
        return [opts.get("gpus", 0), opts.get("ranks", 0), opts.get("hosts")]
    return None


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


class Recorder:
    """The head's side: buffers the facts of one loop turn, writes them at :meth:`flush`.

    The head calls it only when tracing. Per task it keeps what a row needs later, without
    a new object per task (each would cost the head's garbage collector too): ``_spec``
    tid -> spec and ``_tsub`` tid -> submitted until the task resolves, ``_open`` tid ->
    (dispatched, agent ident), one tuple shared by a TASKS message, while an attempt runs.
    """

    def __init__(self, path: str, run_id: str = "") -> None:
        self.path = path
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
        self.rows: list[list[Any]] = []
        self._spec: dict[int, list[Any]] = {}
        self._tsub: dict[int, float] = {}
        self._open: dict[int, tuple[float, bytes]] = {}
        self._num: dict[bytes, int] = {}   # peer ident -> its number (stamped in rows)
        self._agents: set[bytes] = set()   # agents there now
        self.failed = False
        self._packed: list[bytes] = []    # packed turns not written yet
        self._nbytes = 0
        self._write_at = 0.0
        header = {"shoal_trace": VERSION, "t": time.time(), "pid": os.getpid(),
                  "host": socket.gethostname(), "run_id": run_id}
        self._write(_packb(header))

    # ---- peers ------------------------------------------------------------------------
    def joined(self, ident: bytes, role: str, num: int, info: dict[str, Any],
               res: dict[str, Any] | None) -> None:
        self._num[ident] = num
        name = ident.decode(errors="replace")
        if role == "agent" and res is not None:
            self._agents.add(ident)
            self.rows.append([AGENT_JOIN, time.time(), num, name, res["node"],
                              int(info.get("slots", 0)), res["gpus"], res["memory"],
                              str(info.get("host", "")), info.get("pid")])
        else:
            self.rows.append([CLIENT_JOIN, time.time(), num, name, str(info.get("host", "")),
                              info.get("pid")])

    def agent_leaving(self, ident: bytes, reason: str, lost: bool, holds: Iterable[int]) -> None:
        """An agent left or was lost. Called before the core hears of it (attempt numbers
        still those of the attempts that end); ``holds``: MPI tasks led by other agents
        with a share on this one, whose attempts end with it."""
        num = self._num.pop(ident, 0)
        self._agents.discard(ident)
        now = time.time()
        self.rows.append([AGENT_LEAVE, now, num, reason, lost])
        gone = [tid for tid, o in self._open.items() if o[1] == ident]
        self._close(gone, _LOST if lost else RETURNED, now, f"agent {reason}", num)
        self._close([t for t in holds if t in self._open], REVOKED, now,
                    f"an agent holding its ranks left: {reason}")

    def client_left(self, ident: bytes, reason: str, live: dict[int, Any]) -> None:
        """A client left; its tasks were dropped (``live``: the core's tasks after that)."""
        now = time.time()
        self.rows.append([CLIENT_LEAVE, now, self._num.pop(ident, 0), reason])
        self._close([t for t in self._open if t not in live], REVOKED, now, "its client left")
        for tid in [t for t in self._spec if t not in live]:
            self._never_ran(tid, _CANCELLED, now)

    def funcs(self, names: Any) -> None:
        if isinstance(names, dict) and names:
            self.rows.append([FUNCS, names])

    # ---- tasks --------------------------------------------------------------------------
    def submitted(self, specs: list[list[Any]]) -> None:
        tids = list(map(_first, specs))
        self._spec.update(zip(tids, specs, strict=True))
        self._tsub.update(zip(tids, repeat(time.time())))

    def dispatched(self, agent: bytes, specs: list[list[Any]]) -> None:
        opened = self._open
        tids = list(map(_first, specs))
        if not opened.keys().isdisjoint(tids):  # a last attempt ended without word: closed
            self._close([t for t in tids if t in opened], REVOKED, time.time(),
                        "given up by the head", before=1)
        opened.update(zip(tids, repeat((time.time(), agent))))

    def results(self, agent: bytes, items: list[list[Any]]) -> None:
        """RESULTS from ``agent``, before the core sees them: each attempt's row (the
        agent's times, item[5], are taken off the item: the client never gets them).

        The hot path of a traced run: indices are literal (spec: 0 tid, 1 kind, 2 fid,
        5 cores, 8 opts, 9 attempt, 10 owner; item: 0 tid, 1 status, 3 attempt, 4 info)."""
        now = time.time()
        opened, specs, tsub, add = self._open, self._spec, self._tsub, self.rows.append
        num = self._num.get(agent, 0)
        for item in items:
            tr = item.pop() if len(item) > 5 else None
            tid = item[0]
            o = opened.pop(tid, None)
            spec = specs.get(tid)
            if o is None or spec is None or o[1] != agent or item[3] != spec[9]:
                if o is not None:  # a stale attempt: the core drops it too
                    opened[tid] = o
                continue
            info = item[4]
            kind = spec[1]
            opts = spec[8]
            add([ATTEMPT, tid, spec[9], item[1], num, tsub[tid], o[0], now, tr,
                 info and _note(info), spec[10], kind, spec[2] if kind != _CMD else _program(spec),
                 spec[5], opts and _request(opts)])

    def resolved(self, resolve: dict[bytes, list[list[Any]]]) -> None:
        """Tasks resolved (results going to their owners): forget them; those never
        dispatched get an attempt-0 row."""
        specs, tsub = self._spec, self._tsub
        for items in resolve.values():
            for item in items:
                spec = specs.pop(item[0], None)
                if spec is not None:
                    t = tsub.pop(item[0])
                    if not spec[_T_ATTEMPT]:
                        self._row0(spec, t, item[1], time.time())

    def closed(self, agent: bytes, tids: Iterable[int], status: int, why: str) -> None:
        """Attempts that ended without a result: handed back (RETURN) or cancelled there."""
        opened = self._open
        self._close([t for t in tids if t in opened and opened[t][1] == agent], status,
                    time.time(), why, self._num.get(agent, 0))

    def cancelled(self, tids: Iterable[int]) -> None:
        """Tasks a client cancelled before they were dispatched."""
        now = time.time()
        for tid in tids:
            self._never_ran(tid, _CANCELLED, now)

    def _close(self, tids: list[int], status: int, now: float, why: str,
               num: int | None = None, before: int = 0) -> None:
        """Attempts ended without a result (``before``: 1 when the task was dispatched
        again already: its spec holds the next attempt's number)."""
        for tid in tids:
            o = self._open.pop(tid, None)
            spec = self._spec.get(tid)
            if o is None or spec is None:
                continue
            kind = spec[_T_KIND]
            opts = spec[_T_OPTS]
            self.rows.append([ATTEMPT, tid, spec[_T_ATTEMPT] - before, status,
                              self._num.get(o[1], 0) if num is None else num, self._tsub[tid],
                              o[0], now, None, why, spec[_T_OWNER], kind,
                              spec[_T_FID] if kind != _CMD else _program(spec), spec[_T_CORES],
                              opts and _request(opts)])
            if status == _CANCELLED:  # resolved without a result to its owner
                del self._spec[tid]
                del self._tsub[tid]

    def _never_ran(self, tid: int, status: int, now: float) -> None:
        spec = self._spec.pop(tid, None)
        if spec is not None:
            t = self._tsub.pop(tid)
            if not spec[_T_ATTEMPT]:
                self._row0(spec, t, status, now)

    def _row0(self, spec: list[Any], submitted: float, status: int, now: float) -> None:
        kind = spec[_T_KIND]
        opts = spec[_T_OPTS]
        self.rows.append([ATTEMPT, spec[0], 0, status, 0, submitted, None, now, None, None,
                          spec[_T_OWNER], kind, spec[_T_FID] if kind != _CMD else _program(spec),
                          spec[_T_CORES], opts and _request(opts)])

    # ---- writing --------------------------------------------------------------------------
    def flush(self) -> None:
        """Pack this turn's records (one msgpack array); write what is packed when there
        is WRITE_BYTES of it or WRITE_EVERY_S passed since the last write."""
        if self.rows:
            rows, self.rows = self.rows, []
            data = _packb(rows)
            self._packed.append(data)
            self._nbytes += len(data)
        if self._packed and (self._nbytes >= WRITE_BYTES or time.monotonic() >= self._write_at):
            if not self.failed:
                self._write(b"".join(self._packed))
            self._packed.clear()
            self._nbytes = 0
            self._write_at = time.monotonic() + WRITE_EVERY_S

    def due(self) -> float:
        """When packed records must be written (inf: nothing waits); the head's loop wakes
        up for it."""
        return self._write_at if self._packed else float("inf")

    def close(self, stats: dict[str, Any]) -> None:
        """Attempts still open are UNFINISHED; the END record; the file is closed."""
        now = time.time()
        self._close(list(self._open), UNFINISHED, now, "the head stopped")
        for ident in self._agents:  # told to shut down with the head
            self.rows.append([AGENT_LEAVE, now, self._num.get(ident, 0), "the head stopped", False])
        self.rows.append([END, now, stats])
        self._write_at = 0.0
        self.flush()
        try:
            os.close(self.fd)
        except OSError:
            pass

    def _write(self, data: bytes) -> None:
        try:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except OSError as exc:
            # A run is worth more than its trace: go on without it.
            import logging

            logging.getLogger("shoal.head").error(
                "trace %s: cannot write (%s); the run goes on without the trace", self.path,
                exc.strerror)
            self.failed = True


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
