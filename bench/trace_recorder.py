"""The head's trace recorder alone, in-process, on W1-shaped messages (no sockets, no
other process): CPU us per task of each ``Recorder`` method, with the file written.

    PYTHONPATH=TREE python bench/trace_recorder.py [--batch 200] [--reps 5]

Drives whichever ``shoal.trace.store.Recorder`` is on the path (format 3's API, or format
4's, which takes the messages' bodies), so the same command measures two checkouts: 100,000
no-op tasks in SUBMIT, TASKS and RESULTS messages of ``--batch`` tasks, as W1's head sees
them (100-300 a message), the agent's times packed by the real ``AgentTimes``. Timed with
``time.perf_counter`` around each call (the median of ``--reps`` runs, garbage collection
off). Results: docs/benchmarks.md ("Issue 14: trace cost, next step").
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import msgpack

from shoal.trace import store
from shoal.trace.columns import AgentTimes

N = 100_000
ARGS = b"\x80\x05\x95\t\x00\x00\x00\x00\x00\x00\x00K\x00\x85\x94}\x94\x86\x94."  # pickled (0,), {}


def run(batch: int) -> tuple[dict[str, float], int]:
    """One run of N tasks: seconds per method, trace bytes."""
    pack = msgpack.Packer(use_bin_type=True).pack
    new = "body" in inspect.signature(store.Recorder.results).parameters
    tmp = tempfile.mkdtemp(prefix="str")
    r = store.Recorder(os.path.join(tmp, "t"))
    r.joined(b"a", "agent", 2, {"slots": 2}, {"node": "n", "gpus": 0, "memory": 0})
    r.joined(b"c", "client", 1, {}, None)
    acc = dict.fromkeys(("submitted", "dispatched", "results", "flush"), 0.0)
    pc, base = time.perf_counter, 1 << 32
    for s in range(0, N, batch):
        body = pack([3, [[t, 0, base + 1, ARGS, [], 1, -1] for t in range(base + s, base + s + batch)],
                     {}, 0, {}])
        specs: list[Any] = msgpack.unpackb(body, raw=False, strict_map_key=False)[1]
        for sp in specs:  # as the core pads and stamps them
            sp.extend([None] * (11 - len(sp)))
            sp[9], sp[10] = 0, 1
        t = pc()
        r.submitted(specs, body, 1) if new else r.submitted(specs)
        acc["submitted"] += pc() - t
        t = pc()
        r.flush()
        acc["flush"] += pc() - t
        for sp in specs:
            sp[9] = 1
        t = pc()
        r.dispatched(b"a", specs)
        acc["dispatched"] += pc() - t
        t = pc()
        r.flush()
        acc["flush"] += pc() - t
        cols = AgentTimes()
        for _ in specs:
            cols.add([1.0, 2.0, 3.0, None, None, 0])
        blob = cols.take(len(specs))
        rbody = pack([5, [[sp[0], 0, b"\x80\x05K\x02.", 1, None] for sp in specs], blob])
        items = msgpack.unpackb(rbody, raw=False, strict_map_key=False)[1]
        t = pc()
        r.results(b"a", items, blob, rbody) if new else r.results(b"a", items, blob)
        acc["results"] += pc() - t
        t = pc()
        r.flush()
        acc["flush"] += pc() - t
    r.close({})
    size = os.path.getsize(os.path.join(tmp, "t"))
    shutil.rmtree(tmp, ignore_errors=True)
    return acc, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=200, help="tasks a message (default 200)")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    gc.disable()
    runs = [run(args.batch) for _ in range(args.reps)]
    print(f"recorder ({store.__file__}), format {store.VERSION}, {N} tasks in messages of "
          f"{args.batch}, trace {runs[0][1] / 1e6:.1f} MB; us per task, median of {args.reps}:")
    for k in runs[0][0]:
        print(f"  {k:<11}{statistics.median(r[0][k] for r in runs) / N * 1e6:.3f}")
    print(f"  {'all':<11}{statistics.median(sum(r[0].values()) for r in runs) / N * 1e6:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
