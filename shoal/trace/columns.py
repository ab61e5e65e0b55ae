"""The traced agent's times as columns (trace formats 3, 4): what a RESULTS message carries.

A traced agent sends the times of each RESULTS message's items as one blob (the message's
3rd field), which the head stores in its RESULTS record as it came. From format 3 the
blob is a msgpack map of columns, one entry per item in the message's order:

    {"n": N,
     "launched": bin,   N float64 (handed to a worker / posix_spawn called)
     "se": bin,         2N float64: started, ended of item 0, of item 1, ...
        (from format 4 instead "lse": bin, 3N float64: launched, started, ended of
        item 0, of item 1, ...: a worker's bytes as it sent them)
     "worker": bin,     N int32 (the worker's index; -1: not a Python task's worker)
     "extra": nil or {index: [cpus, gpu_ids]},   (only items that have them)
     "mono": float}     (from format 4) the times above are the agent host's monotonic
                        clock; add this (its Unix time less its monotonic time, read
                        when the blob was packed) for Unix seconds

little-endian, NaN where a time is not known. Format 2's blob (a msgpack array of one
``[launched, started, ended, cpus, gpu_ids, worker]`` per item) is still read.

Why monotonic and triples (format 4): a worker reads that clock before and after each
task anyway (time limits, run-time estimates), so a task's start and end cost no clock
read; the agent stamps its launch time on the spec it sends (one clock read per message,
``protocol.T_LAUNCH``) and the worker sends it back with them, so the agent keeps no
table and copies the worker's bytes as they came. The agent and its workers share the
host's monotonic clock, and one offset per message turns it into Unix time exactly (both
clocks are slewed alike by NTP; only a step of the wall clock between a task's end and
its message's packing, milliseconds, would shift that message's times).

Why columns: W1 (100,000 no-op tasks) costs the whole runtime about 26 us of CPU per task,
so the trace has about 1.3 us per task to stay under 5%. A list of six per task, made by
the worker, packed and unpacked on the way to the agent, filled in there and packed again,
cost the agent and its workers about 0.6 us of it (bench/trace_parts.py); a worker now
appends two floats to an array it sends as bytes, and the agent appends to arrays it packs
once per message: about 0.4 us.
"""

from __future__ import annotations

import sys
import time
from array import array
from itertools import repeat
from typing import Any

import msgpack

NAN = float("nan")
_BIG = sys.byteorder == "big"
_packb = msgpack.Packer(use_bin_type=True).pack


def _le(a: array) -> bytes:  # type: ignore[type-arg]
    """An array's bytes, little-endian (the trace is read on any host)."""
    if _BIG:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_le(code: str, data: bytes) -> array:  # type: ignore[type-arg]
    a = array(code)
    a.frombytes(data)
    if _BIG:
        a.byteswap()
    return a


class AgentTimes:
    """The agent's side: the times of the results waiting to go to the head, in step with
    the agent's ``out_results`` (one entry per item, appended where an item is); all of
    them ``time.monotonic()`` of this host (the workers' too).

    Python tasks' results come a worker message at a time (:meth:`worker_results`: the
    worker's launched, started, ended as bytes: launched is the agent's, stamped on the
    spec it sent, ``protocol.T_LAUNCH``); the rest (commands, failures, time-outs) one at
    a time (:meth:`add`)."""

    __slots__ = ("lse", "workers", "extra")

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.lse = array("d")         # launched, started, ended: three per item
        self.workers = array("i")
        self.extra: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return len(self.workers)

    def add(self, times: list[Any] | None) -> None:
        """One item's ``[launched, started, ended, cpus, gpu_ids, worker]`` (None where
        not known; None for all unknown)."""
        launched, started, ended, cpus, gpu_ids, worker = (*(times or ()), *(None,) * 6)[:6]
        if cpus is not None or gpu_ids is not None:
            self.extra[len(self.workers)] = [cpus, gpu_ids]
        self.lse.extend((NAN if launched is None else launched,
                         NAN if started is None else started, NAN if ended is None else ended))
        self.workers.append(-1 if worker is None else worker)

    def worker_results(self, items: list[list[Any]], kept: list[list[Any]], lse: Any,
                       worker: int, gpu_ids: dict[int, Any] | None = None) -> None:
        """The items of one worker's RESULTS that the agent passes on (``kept``: those of
        ``items`` it appended to its results, in order); ``lse``: the worker's bytes of
        launched, started, ended per item (float64, this host's order); ``gpu_ids``: tid
        -> (.., ids) of Python tasks holding GPUs."""
        n = len(kept)
        if not n:
            return
        if isinstance(lse, bytes) and len(lse) == 24 * len(items):
            if n == len(items):
                self.lse.frombytes(lse)
            else:  # some were not passed on (stopped or handed back meanwhile)
                triples = array("d")
                triples.frombytes(lse)
                keep = {id(item) for item in kept}
                for i, item in enumerate(items):
                    if id(item) in keep:
                        self.lse.extend(triples[3 * i:3 * i + 3])
        else:  # no times from the worker
            self.lse.extend(repeat(NAN, 3 * n))
        if gpu_ids:
            base = len(self.workers)
            for i, item in enumerate(kept):
                held = gpu_ids.get(item[0])
                if held is not None:
                    self.extra[base + i] = [None, held[1]]
        self.workers.extend(repeat(worker, n))

    def take(self, n: int) -> bytes | None:
        """The blob for a RESULTS message of ``n`` items; None (times unknown) when the
        columns are not in step with them. The columns start again empty."""
        blob = None
        if len(self.workers) == n and len(self.lse) == 3 * n:
            blob = _packb({"n": n, "lse": _le(self.lse), "worker": _le(self.workers),
                           "extra": self.extra or None,
                           "mono": time.time() - time.monotonic()})
        self.clear()
        return blob


def unpack_columns(cols: dict[Any, Any], n: int) -> list[Any] | None:
    """A format-3 or format-4 blob's map as ``n`` lists ``[launched, started, ended, cpus,
    gpu_ids, worker]`` in Unix seconds (None where not known); None if it is not one of
    ``n`` items."""
    try:
        if cols.get("n") != n:
            return None
        if "lse" in cols:  # format 4: launched, started, ended per item
            lse = _from_le("d", cols["lse"])
            if len(lse) != 3 * n:
                return None
            launched, started, ended = lse[0::3], lse[1::3], lse[2::3]
        else:
            launched = _from_le("d", cols["launched"])
            se = _from_le("d", cols["se"])
            if len(se) != 2 * n:
                return None
            started, ended = se[0::2], se[1::2]
        workers = _from_le("i", cols["worker"])
        extra = cols.get("extra") or {}
        mono = float(cols.get("mono") or 0.0)
    except (KeyError, TypeError, ValueError):
        return None
    if len(launched) != n or len(workers) != n:
        return None
    out = []
    for i, (la, st, en, wk) in enumerate(zip(launched, started, ended, workers, strict=True)):
        ex = extra.get(i)
        out.append([None if la != la else la + mono, None if st != st else st + mono,
                    None if en != en else en + mono,  # NaN: unknown
                    ex[0] if ex else None, ex[1] if ex else None, None if wk < 0 else wk])
    return out
