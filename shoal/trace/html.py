"""`shoal report TRACE -o report.html`: one self-contained HTML page about a traced run.

    from shoal.trace.html import write_html
    write_html("run.trace", "report.html")

The page holds, in this order: the summary (the figures of `shoal trace`, computed by
:func:`shoal.trace.summary`, the same code), the timeline of slots (a Gantt chart: a row
per agent slot, a bar per attempt), utilization over time (cores, and GPUs when any),
queue length over time, the distributions of setup time (dispatched -> started) and run
time per function or command, failures and retries, and a table per function/command.
See docs/report.md ("Reading a report").

Self-contained: Bokeh's JavaScript is inlined (no server, no network; it opens offline
from a file). Large runs are aggregated so that the page's size and drawing time do not
grow with the number of tasks: series are binned in time (400 bins), histograms have 40
bins, and past 10,000 attempts (or 400 rows) the timeline shows each slot's (or agent's)
busy fraction per bin instead of a bar per attempt (:mod:`shoal.trace.bins`).

Needs the optional extra ``report`` (bokeh, numpy): ``pip install 'shoal[report]'``.
"""

from __future__ import annotations

import html
import json
import os
import time
from typing import Any

from shoal.trace.reader import Trace, read
from shoal.trace.report import format_text, summary
from shoal.trace.store import TraceError

EXTRA_HINT = "pip install 'shoal[report]'"
AGENTS_SHOWN = 500   # rows of the agents table (a scrolling box)


def _need_extra() -> None:
    """TraceError (one line, naming the extra) when bokeh or numpy is missing."""
    try:
        import bokeh  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as exc:
        raise TraceError(f"the HTML report needs {exc.name} (the optional extra 'report': "
                         f"{EXTRA_HINT})") from None


def _esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _cell(key: str, value: Any, text: str) -> str:
    """A table cell carrying the summary's own value (``data-value``, JSON: floats round-
    trip exactly) under its key path in the summary (``data-key``), shown as ``text``."""
    return (f'<td class="num" data-key="{_esc(key)}" data-value="{_esc(json.dumps(value))}">'
            f"{_esc(text)}</td>")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f} ms"


def _secs(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) < 1e-3:
        return f"{x * 1e6:.0f} us"
    return f"{x * 1e3:.2f} ms" if abs(x) < 1 else f"{x:.3f} s"


def summary_tables(s: dict[str, Any]) -> str:
    """The summary as HTML tables: counts and utilization, latency percentiles, agents,
    failed attempts (the first shown by `shoal trace`)."""
    rows = [("tasks", "tasks", s["tasks"], f"{s['tasks']:,}"),
            ("ok", "ok", s["ok"], f"{s['ok']:,}"),
            ("failed", "failed", s["failed"], f"{s['failed']:,}"),
            ("cancelled", "cancelled", s["cancelled"], f"{s['cancelled']:,}"),
            ("attempts", "attempts", s["attempts"], f"{s['attempts']:,}"),
            ("retried", "tasks retried", s["retried"], f"{s['retried']:,}"),
            ("failed_attempts", "failed attempts", s["failed_attempts"],
             f"{s['failed_attempts']:,}")]
    if s["tasks"]:
        rows.append(("makespan_s", "makespan", s["makespan_s"], f"{s['makespan_s']:.3f} s"))
    c = s.get("cores")
    if c:
        rows += [("cores.utilization", "core utilization", c["utilization"],
                  _pct(c["utilization"])),
                 ("cores.busy_core_s", "busy core-seconds", c["busy_core_s"],
                  f"{c['busy_core_s']:.2f}"),
                 ("cores.slot_s", "slot-seconds offered", c["slot_s"], f"{c['slot_s']:.2f}"),
                 ("cores.slots_mean", "slots on average", c["slots_mean"],
                  f"{c['slots_mean']:.1f}")]
    g = s.get("gpus")
    if g:
        rows += [("gpus.utilization", "GPU utilization", g["utilization"],
                  _pct(g["utilization"])),
                 ("gpus.busy_gpu_s", "busy GPU-seconds", g["busy_gpu_s"],
                  f"{g['busy_gpu_s']:.2f}"),
                 ("gpus.gpu_s", "GPU-seconds offered", g["gpu_s"], f"{g['gpu_s']:.2f}")]
    out = ['<div class="tables"><table class="summary" id="summary-counts"><tbody>']
    out += [f"<tr><th>{_esc(label)}</th>{_cell(key, v, text)}</tr>"
            for key, label, v, text in rows]
    out.append("</tbody></table>")
    lat = [("setup_s", "setup", "dispatched -> started"),
           ("head_latency_s", "head", "submitted -> dispatched (first attempts)"),
           ("phases_s.to_agent", "to agent", "dispatched -> launched"),
           ("phases_s.launch", "launch", "launched -> started"),
           ("phases_s.return", "return", "ended -> received")]
    lrows = []
    for key, label, what in lat:
        p = s.get(key) if "." not in key else (s.get("phases_s") or {}).get(key.split(".")[1])
        if not p:
            continue
        cells = [_cell(f"{key}.n", p["n"], f"{p['n']:,}")]
        cells += [_cell(f"{key}.{q}", p[q], _ms(p[q])) for q in ("p50", "p90", "p99", "max")]
        lrows.append(f'<tr><th title="{_esc(what)}">{_esc(label)}<br><span class="what">'
                     f'{_esc(what)}</span></th>{"".join(cells)}</tr>')
    if lrows:
        out.append('<table class="summary" id="summary-latency"><thead><tr><th></th>'
                   '<th>n</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr></thead>'
                   f'<tbody>{"".join(lrows)}</tbody></table>')
    out.append("</div>")
    agents = s.get("agents") or []
    if agents:
        out.append(f'<div class="scroll"><table class="list" id="summary-agents"><thead><tr>'
                   f"<th>agent ({len(agents):,})</th><th>node</th><th>slots</th><th>GPUs</th>"
                   "<th>attempts</th><th>busy</th><th>left</th></tr></thead><tbody>")
        for i, a in enumerate(agents[:AGENTS_SHOWN]):
            out.append(f"<tr><td>{_esc(a['name'])}</td><td>{_esc(a['node'])}</td>"
                       + _cell(f"agents.{i}.slots", a["slots"], str(a["slots"]))
                       + _cell(f"agents.{i}.gpus", a["gpus"], str(a["gpus"]))
                       + _cell(f"agents.{i}.tasks", a["tasks"], f"{a['tasks']:,}")
                       + _cell(f"agents.{i}.busy_fraction", a["busy_fraction"],
                               _pct(a["busy_fraction"]))
                       + f"<td>{_esc(a['left'] or '')}</td></tr>")
        out.append("</tbody></table></div>")
        if len(agents) > AGENTS_SHOWN:
            out.append(f"<p>... and {len(agents) - AGENTS_SHOWN:,} more agents "
                       "(<code>shoal trace --json</code> lists all).</p>")
    return "\n".join(out)


def _failures_html(s: dict[str, Any], x: Any) -> str:
    out = []
    if s["failures"]:
        more = s["failed_attempts"] - len(s["failures"])
        first = f" (the first {len(s['failures'])})" if more else ""
        out.append(f"<h3>Failed attempts{first}</h3>")
        out.append('<table class="list" id="failures"><thead><tr><th>task</th><th>attempt</th>'
                   "<th>function / command</th><th>agent</th><th>status</th><th>why</th></tr>"
                   "</thead><tbody>")
        for f in s["failures"]:
            out.append(f"<tr><td>{f['tid']:#x}</td><td>{f['attempt']}</td><td>{_esc(f['name'])}"
                       f"</td><td>{_esc(f['agent'] or '-')}</td><td>{_esc(f['status'])}</td>"
                       f"<td>{_esc(f['note'] or '')}</td></tr>")
        out.append("</tbody></table>")
        if more:
            out.append(f"<p>... and {more:,} more (<code>shoal trace --csv</code> lists all).</p>")
    if x is not None and x.retried:
        more = x.retried_total - len(x.retried)
        first = f" (the first {len(x.retried)})" if more else ""
        out.append(f"<h3>Retried tasks{first}</h3>")
        out.append('<table class="list" id="retried"><thead><tr><th>task</th>'
                   "<th>function / command</th><th>attempts</th><th>each attempt</th>"
                   "<th>agents</th></tr></thead><tbody>")
        for r in x.retried:
            out.append(f"<tr><td>{r['tid']:#x}</td><td>{_esc(r['name'])}</td>"
                       f"<td>{r['attempts']}</td><td>{_esc(' / '.join(r['statuses']))}</td>"
                       f"<td>{_esc(', '.join(r['agents']))}</td></tr>")
        out.append("</tbody></table>")
        if more:
            out.append(f"<p>... and {more:,} more.</p>")
    return "\n".join(out)


def _by_name_html(x: Any, shown: int = 50) -> str:
    rows = x.by_name
    out = ['<table class="list" id="by-name"><thead><tr><th>function / command</th>'
           "<th>kind</th><th>attempts</th><th>failed</th><th>run p50</th><th>run p90</th>"
           "<th>run max</th><th>setup p50</th><th>setup p90</th><th>busy core-s</th></tr>"
           "</thead><tbody>"]
    for r in rows[:shown]:
        run, setup = r["run_s"] or {}, r["setup_s"] or {}
        out.append(f"<tr><td>{_esc(r['name'])}</td><td>{r['kind']}</td>"
                   f'<td class="num">{r["attempts"]:,}</td><td class="num">{r["failed"]:,}</td>'
                   + "".join(f'<td class="num">{_secs(d.get(q))}</td>'
                             for d, q in ((run, "p50"), (run, "p90"), (run, "max"),
                                          (setup, "p50"), (setup, "p90")))
                   + f'<td class="num">{r["busy_core_s"]:.2f}</td></tr>')
    out.append("</tbody></table>")
    if len(rows) > shown:
        out.append(f"<p>... and {len(rows) - shown:,} more.</p>")
    return "\n".join(out)


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em 2em;
       color: #222; max-width: 1400px; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.6em;
  border-bottom: 1px solid #ddd; } h3 { font-size: 1em; }
.sub { color: #555; margin-top: 0; } .what { color: #777; font-weight: normal;
  font-size: 0.8em; } .note { color: #555; font-size: 0.9em; }
.tables { display: flex; gap: 2em; flex-wrap: wrap; align-items: flex-start; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #eee; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.summary th { font-weight: 600; } .pair { display: grid;
  grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 1em; }
.figure { margin: 0.5em 0; } .scroll { max-height: 22em; overflow-y: auto;
  display: inline-block; border: 1px solid #eee; } pre { background: #f6f6f6; padding: 0.7em; overflow-x: auto; }
"""


def _timeline_note(g: Any) -> str:
    pan = "Drag to pan, wheel to zoom; every figure on this time axis follows."
    if g is None or g.bars is not None:
        return ("A row per slot of each agent (a lane: attempts that ran at once on one agent "
                "are on different rows); hover a bar for the task. Failed attempts are hatched "
                "red. " + pan)
    rows = {"slot": "slot of each agent (a lane: attempts that ran at once on one agent are on "
                    "different rows)",
            "agent": "agent (its busy cores over its slots)",
            "agents": "group of neighbouring agents (their busy cores over their slots)"}[g.unit]
    return (f"{g.shown:,} attempts: a row per {rows}, coloured by the share of each time bin it "
            f"was busy (dark: busy all the bin). " + pan)


def build_html(source: str | os.PathLike[str] | Trace, run: int = -1) -> str:
    """The report page of one run of a trace (a path or a :class:`Trace`) as a string."""
    _need_extra()
    from bokeh.embed import components
    from bokeh.models import Range1d
    from bokeh.resources import Resources

    from shoal.trace import figures as F
    from shoal.trace.bins import series

    trace = source if isinstance(source, Trace) else read(source, run)
    s = summary(trace)
    x = series(trace, s)
    figs: dict[str, Any] = {}
    if x is not None:
        xr = Range1d(0, x.span, bounds=(-0.02 * x.span, 1.02 * x.span))
        colors = F.names_palette([a.name for a in trace.attempts if a.attempt])
        if x.gantt is not None:
            figs["timeline"] = F.timeline(x.gantt, x.span, xr, colors)
        figs["utilization"] = F.utilization(x, xr)
        if x.busy_gpus is not None:
            figs["gpu-utilization"] = F.utilization(x, xr, gpus=True)
        figs["queue"] = F.queue(x, xr)
        if x.setup is not None:
            figs["setup"] = F.histogram(x.setup, "Setup time per attempt (dispatched -> started)",
                                        colors)
        if x.run is not None:
            figs["runtime"] = F.histogram(x.run, "Run time per attempt (started -> ended)", colors)
        if x.failures:
            figs["failures"] = F.failures(x, xr)
    script, divs = components(figs) if figs else ("", {})

    def fig(key: str, note: str = "") -> str:
        if key not in divs:
            return ""
        return (f'<div class="figure" data-figure="{key}">{divs[key]}</div>'
                + (f'<p class="note">{note}</p>' if note else ""))

    text = format_text(s)
    title = f"shoal report: {os.path.basename(trace.path)}"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    body = [f"<h1>{_esc(title)}</h1>",
            f'<p class="sub">{_esc(text.splitlines()[0])}; host {_esc(trace.header.get("host", "?"))}'
            f"; page made {when}</p>",
            '<section id="summary"><h2>Summary</h2>', summary_tables(s),
            "<details><summary>as text (<code>shoal trace</code>)</summary>"
            f"<pre>{_esc(text)}</pre></details></section>"]
    if x is None:
        body.append("<p>No attempts in this run: nothing to draw.</p>")
    else:
        body += ['<section id="timeline"><h2>Timeline of slots</h2>',
                 fig("timeline", _timeline_note(x.gantt)),
                 '</section><section id="utilization"><h2>Utilization over time</h2>',
                 fig("utilization"), fig("gpu-utilization"),
                 '</section><section id="queue"><h2>Queue length over time</h2>',
                 fig("queue", "Waiting in the head: submitted (or back after a failed "
                     "attempt) and not yet sent to an agent, including tasks waiting for "
                     "their dependencies. Waiting on an agent: sent ahead (prefetch), not "
                     "started. Running: started, not ended."),
                 '</section><section id="distributions"><h2>Setup and run time per function '
                 'or command</h2><div class="pair">', fig("setup"), fig("runtime"), "</div>",
                 _by_name_html(x),
                 '</section><section id="failures-retries"><h2>Failures and retries</h2>',
                 fig("failures") or "<p>No failed attempts.</p>",
                 _failures_html(s, x), "</section>"]
    res = Resources(mode="inline", components=["bokeh"])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title>\n{res.render()}\n<style>{CSS}</style></head>\n"
            f"<body>\n{chr(10).join(body)}\n{script}\n</body></html>\n")


def write_html(source: str | os.PathLike[str] | Trace, out: str | os.PathLike[str],
               run: int = -1) -> int:
    """Write the report page of ``source`` (a trace path or :class:`Trace`) to ``out``;
    returns its size in bytes. TraceError (one line) for a bad trace, an unwritable
    output, or the extra not installed."""
    where = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(where):  # before the work of building the page
        raise TraceError(f"cannot write the report {os.fspath(out)!r}: no directory {where!r}")
    page = build_html(source, run).encode()
    tmp = f"{os.fspath(out)}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(page)
        os.replace(tmp, out)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise TraceError(f"cannot write the report {os.fspath(out)!r}: {exc.strerror}") from None
    return len(page)


def cli(file: str, output: str | None, run: int = -1, command: str = "report") -> int:
    """`shoal report FILE [-o HTML] [--run N]` and `shoal trace FILE --html HTML`: write the
    page, say where and how big; a bad trace, an unwritable output or the missing extra
    is one line on stderr and exit status 2."""
    import sys

    out = output or (os.path.splitext(file)[0] + ".html")
    try:
        size = write_html(file, out, run)
    except TraceError as exc:
        print(f"shoal {command}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({size / 1e6:.1f} MB)")
    return 0

