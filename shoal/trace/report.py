"""The trace report: what ran where, how busy the run kept its cores, what setup cost.

Definitions (all over one head run; see docs/trace.md):
- window: from the first task submitted to the last attempt received; ``makespan`` is its
  length.
- utilization (cores): busy core-seconds / slot-seconds. Busy: each attempt's
  ``ended - started`` times the cores it held (cores x ranks). Slot-seconds: each agent's
  slots times the part of the window it was there (from its join and leave records), so
  agents that came late or left early count only while they were there. GPUs alike.
- setup time: ``started - dispatched`` of each attempt that started (the head's send, the
  agent's queue and hand-over, a worker's queue or the process spawn).
- head latency: ``dispatched - submitted`` of first attempts (queueing in the head,
  including waiting for a free slot).
- phases: setup split at the agent's hand-over: ``to agent`` (dispatched -> launched: the
  message, the agent's queue) and ``launch`` (launched -> started: a worker's queue, the
  process spawn); ``return`` (ended -> received: the result's way back).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from typing import Any

from shoal.trace.reader import Attempt, Trace, read
from shoal.trace.store import TraceError

FAILURES_SHOWN = 20


def percentiles(values: list[float]) -> dict[str, float] | None:
    """n, mean, p50, p90, p99, max of ``values`` (None when empty)."""
    if not values:
        return None
    v = sorted(values)
    n = len(v)

    def q(p: float) -> float:
        return v[min(n - 1, int(p * n))]

    return {"n": n, "mean": sum(v) / n, "p50": q(0.5), "p90": q(0.9), "p99": q(0.99),
            "max": v[-1]}


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def summary(source: str | os.PathLike[str] | Trace, run: int = -1) -> dict[str, Any]:
    """The report of one run of a trace (a path, read with :func:`shoal.trace.read`, or a
    :class:`Trace`), as a JSON-ready dict; see the module docstring for the definitions."""
    trace = source if isinstance(source, Trace) else read(source, run)
    atts = trace.attempts
    out: dict[str, Any] = {"path": trace.path, "run": trace.run, "runs": trace.runs,
                           "started": trace.header.get("t"), "ended": trace.ended,
                           "truncated": trace.truncated}
    final: dict[int, Attempt] = {}
    count: dict[int, int] = defaultdict(int)
    for a in atts:
        if a.attempt:
            count[a.tid] += 1
        prev = final.get(a.tid)
        if prev is None or a.attempt >= prev.attempt:
            final[a.tid] = a
    out["tasks"] = len(final)
    out["attempts"] = sum(count.values())
    out["ok"] = sum(1 for a in final.values() if a.status == "ok" and not a.failed)
    out["failed"] = sum(1 for a in final.values() if a.failed)
    out["cancelled"] = sum(1 for a in final.values() if a.status == "cancelled")
    out["retried"] = sum(1 for n in count.values() if n > 1)
    failed_atts = [a for a in atts if a.attempt and a.failed]
    out["failed_attempts"] = len(failed_atts)
    if not atts:
        out.update(makespan_s=0.0, cores=None, gpus=None, setup_s=None, head_latency_s=None,
                   phases_s=None, agents=[], failures=[])
        return out
    t0 = min(a.submitted for a in atts)
    t1 = max(a.received for a in atts)
    span = max(t1 - t0, 1e-9)
    out["window"] = [t0, t1]
    out["makespan_s"] = t1 - t0
    busy: dict[str | None, float] = defaultdict(float)
    busy_gpu: dict[str | None, float] = defaultdict(float)
    tasks_on: dict[str | None, int] = defaultdict(int)
    setup, latency, to_agent, launch, back = [], [], [], [], []
    for a in atts:
        if a.agent is not None and a.attempt:
            tasks_on[a.agent] += 1
        if a.started is not None and a.ended is not None:
            ran = max(0.0, a.ended - a.started)
            busy[a.agent] += ran * a.core_count
            if a.gpus:
                busy_gpu[a.agent] += ran * a.gpus * max(1, a.ranks)
        if a.started is not None and a.dispatched is not None:
            setup.append(a.started - a.dispatched)
        if a.attempt == 1 and a.dispatched is not None:
            latency.append(a.dispatched - a.submitted)
        if a.launched is not None:
            if a.dispatched is not None:
                to_agent.append(a.launched - a.dispatched)
            if a.started is not None:
                launch.append(a.started - a.launched)
        if a.ended is not None:
            back.append(a.received - a.ended)
    slot_s = gpu_s = 0.0
    agents = []
    by_name: dict[str, dict[str, Any]] = {}
    for g in trace.agents:
        there = _overlap(g.joined, g.left if g.left is not None else t1, t0, t1)
        slot_s += g.slots * there
        gpu_s += g.gpus * there
        row = by_name.get(g.name)
        if row is None:
            row = by_name[g.name] = {"name": g.name, "node": g.node, "slots": g.slots,
                                     "gpus": g.gpus, "tasks": tasks_on.get(g.name, 0),
                                     "busy_core_s": busy.get(g.name, 0.0), "slot_s": 0.0,
                                     "left": None}
            agents.append(row)
        row["slot_s"] += g.slots * there
        if g.left is not None:
            row["left"] = f"{'lost' if g.lost else 'left'}: {g.reason}"
    for row in agents:
        row["busy_fraction"] = row["busy_core_s"] / row["slot_s"] if row["slot_s"] else None
        del row["slot_s"]
    out["cores"] = {"busy_core_s": sum(busy.values()), "slot_s": slot_s,
                    "slots_mean": slot_s / span,
                    "utilization": sum(busy.values()) / slot_s if slot_s else None}
    out["gpus"] = ({"busy_gpu_s": sum(busy_gpu.values()), "gpu_s": gpu_s,
                    "utilization": sum(busy_gpu.values()) / gpu_s if gpu_s else None}
                   if gpu_s or busy_gpu else None)
    out["setup_s"] = percentiles(setup)
    out["head_latency_s"] = percentiles(latency)
    out["phases_s"] = {"to_agent": percentiles(to_agent), "launch": percentiles(launch),
                       "return": percentiles(back)}
    out["agents"] = agents
    out["failures"] = [
        {"tid": a.tid, "attempt": a.attempt, "name": a.name, "agent": a.agent,
         "status": a.status, "note": a.note}
        for a in failed_atts[:FAILURES_SHOWN]]
    return out


def brief(path: str | os.PathLike[str]) -> list[str]:
    """A few lines on the last run of the trace at ``path``, for the end of ``shoal run``
    (utilization, setup and head latency, the agents); one line saying why when it cannot
    be read."""
    try:
        s = summary(path)
    except TraceError as exc:
        return [f"trace: {exc}"]
    if not s["tasks"]:
        return [f"trace {s['path']}: no tasks"]
    c = s["cores"] or {}
    p = s["setup_s"] or {}
    h = s["head_latency_s"] or {}
    lines = [f"trace {s['path']}: core utilization {_pct(c.get('utilization'))} over "
             f"{s['makespan_s']:.2f} s; setup p50 {p.get('p50', 0) * 1e3:.2f} ms, "
             f"p90 {p.get('p90', 0) * 1e3:.2f} ms; head p50 {h.get('p50', 0) * 1e3:.2f} ms"]
    if s["gpus"]:
        lines.append(f"  GPU utilization {_pct(s['gpus']['utilization'])}")
    for a in s["agents"][:16]:
        lines.append(f"  {a['name']} ({a['node']}, {a['slots']} slots): {a['tasks']} attempts, "
                     f"{_pct(a['busy_fraction'])} busy")
    if len(s["agents"]) > 16:
        lines.append(f"  ... and {len(s['agents']) - 16} more agents (shoal trace {s['path']})")
    return lines


def _ms(p: dict[str, float] | None) -> str:
    if not p:
        return "-"
    return (f"p50 {p['p50'] * 1e3:.2f} ms, p90 {p['p90'] * 1e3:.2f} ms, "
            f"p99 {p['p99'] * 1e3:.2f} ms, max {p['max'] * 1e3:.2f} ms (n={p['n']})")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def format_text(s: dict[str, Any]) -> str:
    """The report as a few lines of text (what ``shoal trace FILE`` prints)."""
    when = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["started"]))
            if s.get("started") else "?")
    state = "ended" if s.get("ended") else "no end record (killed, or still running)"
    lines = [f"trace {s['path']}: run {s['run']} of {s['runs']}, started {when}, {state}"
             + (", last record torn" if s.get("truncated") else "")]
    cancelled = f", {s['cancelled']} cancelled" if s.get("cancelled") else ""
    lines.append(f"tasks      {s['tasks']} ({s['ok']} ok, {s['failed']} failed{cancelled}), "
                 f"{s['attempts']} attempts, {s['retried']} tasks retried, "
                 f"{s['failed_attempts']} failed attempts")
    if not s["tasks"]:
        return "\n".join(lines)
    lines.append(f"makespan   {s['makespan_s']:.3f} s")
    c = s["cores"]
    if c is not None:
        lines.append(f"cores      utilization {_pct(c['utilization'])} "
                     f"({c['busy_core_s']:.2f} busy core-s of {c['slot_s']:.2f} slot-s, "
                     f"{c['slots_mean']:.1f} slots on average)")
    g = s.get("gpus")
    if g:
        lines.append(f"gpus       utilization {_pct(g['utilization'])} "
                     f"({g['busy_gpu_s']:.2f} busy GPU-s of {g['gpu_s']:.2f} GPU-s)")
    lines.append(f"setup      {_ms(s['setup_s'])}   (dispatched -> started)")
    lines.append(f"head       {_ms(s['head_latency_s'])}   (submitted -> dispatched)")
    phases = s.get("phases_s") or {}
    for key, label, what in (("to_agent", "to agent", "dispatched -> launched"),
                             ("launch", "launch", "launched -> started"),
                             ("return", "return", "ended -> received")):
        if phases.get(key):
            lines.append(f"{label:<11}{_ms(phases[key])}   ({what})")
    if s["agents"]:
        width = max(len(a["name"]) for a in s["agents"])
        lines.append(f"{'agent':<{width}}  {'node':<12}{'slots':>6}{'tasks':>9}{'busy':>8}")
        for a in s["agents"]:
            lines.append(f"{a['name']:<{width}}  {a['node'][:12]:<12}{a['slots']:>6}"
                         f"{a['tasks']:>9}{_pct(a['busy_fraction']):>8}"
                         + (f"  ({a['left']})" if a["left"] else ""))
    for f in s["failures"]:
        lines.append(f"failed     task {f['tid']:#x} attempt {f['attempt']} ({f['name']}) on "
                     f"{f['agent'] or '-'}: {f['status']}" + (f": {f['note']}" if f["note"] else ""))
    if s["failed_attempts"] > len(s["failures"]):
        lines.append(f"           ... and {s['failed_attempts'] - len(s['failures'])} more")
    return "\n".join(lines)


CSV_FIELDS = ("tid", "attempt", "status", "kind", "name", "owner", "cores", "gpus", "ranks",
              "agent", "node", "submitted", "dispatched", "launched", "started", "ended",
              "received", "cpus", "gpu_ids", "worker", "note")
_TIMES = ("submitted", "dispatched", "launched", "started", "ended", "received")


def write_csv(trace: Trace, out: Any) -> None:
    """Every attempt of ``trace`` as CSV (times in seconds from the run's header time)."""
    import csv

    t0 = trace.header.get("t") or 0.0
    w = csv.writer(out)
    w.writerow(CSV_FIELDS)
    for a in trace.attempts:
        row = a._asdict()
        for k in _TIMES:
            if row[k] is not None:
                row[k] = f"{row[k] - t0:.6f}"
        for k in ("cpus", "gpu_ids"):
            if row[k] is not None:
                row[k] = " ".join(map(str, row[k]))
        w.writerow([row[k] for k in CSV_FIELDS])


def main(argv: list[str] | None = None) -> int:
    """``shoal trace FILE [--json] [--run N]``: the report of a trace file."""
    ap = argparse.ArgumentParser(prog="shoal trace", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("file", help="a trace written by `shoal head --trace FILE` (or --trace)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--csv", action="store_true",
                    help="print every attempt instead, one CSV line each (times in seconds from "
                         "the run's start)")
    ap.add_argument("--run", type=int, default=-1, metavar="N",
                    help="which head run of the file (1-based; default: the last)")
    ap.add_argument("--html", metavar="FILE", help="write the HTML report to FILE instead "
                    "(as `shoal report TRACE -o FILE`; needs the extra 'report')")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "html", None):
        from shoal.trace.html import cli

        return cli(args.file, args.html, args.run, "trace")
    try:
        if getattr(args, "csv", False):
            try:
                write_csv(read(args.file, args.run), sys.stdout)
                sys.stdout.flush()
            except BrokenPipeError:  # `shoal trace --csv FILE | head`: not an error
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        s = summary(args.file, args.run)
    except TraceError as exc:
        print(f"shoal trace: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(s, sys.stdout, indent=1)
        print()
    else:
        print(format_text(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
