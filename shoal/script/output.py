"""Human-readable views of a plan: the dry-run listing and Graphviz dot."""

from __future__ import annotations

import os

from .compiler import Plan


def dry_run(plan: Plan, cwd: str) -> str:
    """One line per command: id, script line, dependencies, cluster, the command."""
    cluster_of = {v: c.id for c in plan.clusters for v in c.steps}
    lines = []
    for s in plan.dag.steps:
        deps = ",".join(f"#{p}" for p in sorted(plan.dag.preds[s.id])) or "-"
        flags = []
        if s.barrier:
            flags.append("barrier")
        if s.id in plan.dag.noop:
            flags.append("no-op: intermediates only")
        where = "" if s.cwd == cwd else f" (in {os.path.relpath(s.cwd, cwd)})"
        extra = f"  [{', '.join(flags)}]" if flags else ""
        lines.append(f"#{s.id} line {s.line} after {deps} cluster {cluster_of[s.id]}: "
                     f"{s.describe()}{where}{extra}")
    scratch = plan.dag.scratch_groups()
    lines.append(f"# {len(plan.dag.steps)} commands, {plan.dag.edges} dependencies, "
                 f"{len(plan.clusters)} clusters, {len(scratch)} intermediate files in scratch, "
                 f"compiled in {plan.timings['total'] * 1000:.1f} ms")
    if scratch:
        names = sorted({os.path.relpath(g.path, cwd) for g in scratch})
        shown = " ".join(names[:20]) + (" ..." if len(names) > 20 else "")
        lines.append(f"# intermediates: {shown}")
    outs = [os.path.relpath(p, cwd) for p in plan.dag.final_outputs()]
    if outs:
        lines.append(f"# outputs: {' '.join(outs[:20])}{' ...' if len(outs) > 20 else ''}")
    return "\n".join(lines) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def to_dot(plan: Plan) -> str:
    """The DAG in Graphviz dot, one subgraph per cluster."""
    out = ["digraph script {", "  rankdir=TB;", "  node [shape=box, fontsize=10];"]
    for c in plan.clusters:
        if len(c.steps) > 1:
            out.append(f"  subgraph cluster_{c.id} {{ label=\"cluster {c.id}\"; style=dashed;")
        for v in c.steps:
            s = plan.dag.steps[v]
            label = f"{s.line}: {s.describe()}"
            if len(label) > 60:
                label = label[:57] + "..."
            attrs = ", style=filled, fillcolor=orange" if s.barrier else ""
            out.append(f"    n{v} [label={_dot_quote(label)}{attrs}];")
        if len(c.steps) > 1:
            out.append("  }")
    for v, ps in enumerate(plan.dag.preds):
        for p in sorted(ps):
            out.append(f"  n{p} -> n{v};")
    out.append("}")
    return "\n".join(out) + "\n"
