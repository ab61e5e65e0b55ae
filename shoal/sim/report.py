"""A simulation's result as text (``shoal sim``)."""

from __future__ import annotations

from shoal.sim.engine import SimResult


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_text(r: SimResult) -> str:
    """A few lines: the machine, the run, utilization, the head's cost."""
    s = r.settings
    lines = [
        f"{r.workload}: {r.agents} agents x {r.cores} cores"
        + (f" + {r.gpus} GPUs" if r.gpus else "")
        + f", {r.tasks:,} tasks ({s.get('policy')}, prefetch {s.get('prefetch')}, results {s.get('results')}, "
        f"head cost {s.get('cost')}, latency {1e6 * s.get('latency_s', 0):.0f} us)",
        f"  resolved      {r.ok:,} ok, {r.failed:,} failed, {r.unfinished:,} unfinished",
        f"  makespan      {r.makespan_s:,.2f} s virtual (no run can be shorter than "
        f"{r.bound_s:,.2f} s: {_pct(r.bound_s / r.makespan_s if r.makespan_s else None)} of it; "
        f"utilization at best {_pct(r.best_util)})",
        f"  utilization   cores {_pct(r.core_util)}   GPUs {_pct(r.gpu_util)}   cores while "
        f"tasks were queued {_pct(r.queued_util)} (from the first dispatch at {r.first_dispatch_s:,.2f} s, "
        f"to the last at {r.last_dispatch_s:,.2f} s)",
        f"  dispatch      {r.dispatch_rate:,.0f} tasks/s virtual (peak {r.dispatch_peak:,.0f} in "
        f"one second), mean wait to start {r.wait_mean_s:,.2f} s",
        f"  head          {r.decisions:,} decisions in {r.head_cpu_s:.2f} s CPU = "
        f"{r.decisions_per_cpu_s:,.0f} decisions/s; busy {_pct(r.head_busy)} of the makespan; "
        f"{r.turns:,} turns, {r.results_msgs:,} RESULTS messages",
        *([f"  plan          {s['plans']} plan(s) of {s['plan_tries']} packings"
           + (f"; given up at {s['plan_dropped_s']:,.2f} s (estimates missed)"
              if s.get("plan_dropped_s") is not None else "")] if s.get("plans") else []),
        "  over time     cores busy in each twentieth of the makespan: "
        + " ".join(f"{100 * x:.0f}" for x in r.util_profile),
        f"  simulation    {r.wall_s:.1f} s real, {r.events:,} events",
    ]
    return "\n".join(lines)
