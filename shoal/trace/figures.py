"""The report's figures, drawn with Bokeh from :class:`shoal.trace.bins.Series`.

Bokeh (not Plotly): its inline JavaScript is 1.3 MB against Plotly's 4.8 MB, and it draws
on a canvas, so a page of a few thousand bars stays light. Figures on the run's time axis
share one x range: zooming one zooms all.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from bokeh.models import (
    BasicTickFormatter,
    ColorBar,
    ColumnDataSource,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    Range1d,
)
from bokeh.palettes import Blues256, Category10_10
from bokeh.plotting import figure
from bokeh.transform import factor_cmap

from shoal.trace.bins import Gantt, Hist, Series

TOOLS = "xpan,xwheel_zoom,box_zoom,reset,save"
OTHER = "#9e9e9e"
FAILED = "#d62728"
TIME_AXIS_LEFT, TIME_AXIS_RIGHT = 180, 90   # px: room for agent#lane labels, a colour bar
# Category10 without its red (red marks failures) and grey (the rest): 8 names apart
NAME_COLORS = [c for c in Category10_10 if c not in (FAILED, "#7f7f7f")]
STATUS_COLORS = {"error": FAILED, "exit != 0": "#ff7f0e", "lost": "#9467bd",
                 "timeout": "#8c564b", "depfail": "#e377c2", "revoked": "#7f7f7f"}


def _fig(title: str, x_range: Range1d | None, height: int, y_label: str,
         x_label: str = "seconds since the first task was submitted", **kw: Any) -> Any:
    if x_range is not None:
        kw["x_range"] = x_range
    if x_range is not None:  # the figures on the run's time axis: plot areas aligned
        kw.update(min_border_left=TIME_AXIS_LEFT, min_border_right=TIME_AXIS_RIGHT)
    p = figure(title=title, height=height, sizing_mode="stretch_width", tools=TOOLS, **kw)
    p.xaxis.axis_label = x_label
    p.yaxis.axis_label = y_label
    p.yaxis.formatter = BasicTickFormatter(use_scientific=False)
    p.toolbar.logo = None
    return p


def _legend(p: Any, where: str = "right") -> None:
    """The legend beside (or above) the plot, not over its data; a click hides a series."""
    if not p.legend:
        return
    legend = p.legend[0]
    legend.click_policy = "hide"
    legend.label_text_font_size = "9pt"
    if where == "above":
        legend.orientation = "horizontal"
    p.add_layout(legend, where)


def _row_ticks(p: Any, g: Gantt) -> None:
    """Label each row when few; else the first row of each agent when few agents."""
    n = len(g.rows)
    if n <= 40:
        ticks = {i + 0.5: label for i, label in enumerate(g.rows)}
    else:
        ticks = {}
        for i, a in enumerate(g.row_agent):
            if not i or g.row_agent[i - 1] != a:
                ticks[i + 0.5] = a
        if len(ticks) > 40:
            step = -(-len(ticks) // 40)
            ticks = dict(list(ticks.items())[::step])
    p.yaxis.ticker = FixedTicker(ticks=list(ticks))
    p.yaxis.major_label_overrides = ticks
    p.yaxis.major_label_text_font_size = "8pt"


def names_palette(names: list[str]) -> dict[str, str]:
    """A colour per function/command name: the ten most frequent their own, others grey
    (the same colours in the timeline and the histograms)."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    top = sorted(counts, key=lambda n: -counts[n])[:len(NAME_COLORS)]
    return {n: NAME_COLORS[i] for i, n in enumerate(top)}


def timeline(g: Gantt, span: float, x_range: Range1d, colors: dict[str, str]) -> Any:
    n = len(g.rows)
    height = max(220, min(720, 14 * n + 110)) + (40 if g.bars is not None else 0)  # legend
    p = _fig("", x_range, height, {"slot": "agent #lane", "agent": "agent",
                                   "agents": "agents"}[g.unit],
             y_range=Range1d(0, max(n, 1)))
    if g.bars is not None:
        p.title.text = f"Timeline of slots: {g.shown:,} attempts, one bar each (started -> ended)"
        bars = dict(g.bars)
        bars["color_key"] = [nm if nm in colors else "other" for nm in bars["name"]]
        src = ColumnDataSource(bars)
        factors = [*colors, "other"]
        r = p.quad(left="left", right="right", bottom="bottom", top="top", source=src,
                   fill_color=factor_cmap("color_key", [*colors.values(), OTHER], factors),
                   line_color="white", line_width=0.5, legend_field="color_key",
                   name="attempts")
        fail = [i for i, f in enumerate(bars["failed"]) if f]
        if fail:
            fsrc = ColumnDataSource({k: [v[i] for i in fail] for k, v in bars.items()})
            p.quad(left="left", right="right", bottom="bottom", top="top", source=fsrc,
                   fill_alpha=0, line_color=FAILED, line_width=2, hatch_pattern="x",
                   hatch_color=FAILED, hatch_alpha=0.6, legend_label="failed attempt",
                   name="failed attempts")
        p.add_tools(HoverTool(renderers=[r], tooltips=[
            ("", "@name"), ("task", "@tid attempt @attempt"), ("status", "@status"),
            ("agent", "@agent"), ("started", "@left{0.000} s"), ("ran", "@run{0.000} s")]))
        _legend(p, "above")
    else:
        what = {"slot": "each slot", "agent": "each agent's slots",
                "agents": "each group of agents' slots"}[g.unit]
        p.title.text = (f"Timeline of slots: {g.shown:,} attempts, too many for a bar each: "
                        f"busy fraction of {what} per {g.bin_s:.3g} s")
        mapper = LinearColorMapper(palette=list(reversed(Blues256)), low=0, high=100)
        assert g.image is not None
        r = p.image(image=[g.image], x=0, y=0, dw=span, dh=n, color_mapper=mapper,
                    name="busy")
        p.add_layout(ColorBar(color_mapper=mapper, title="% busy", width=10), "right")
        p.add_tools(HoverTool(renderers=[r], tooltips=[("busy", "@image %"),
                                                       ("at", "$x{0.00} s"), ("row", "$y{0}")]))
    _row_ticks(p, g)
    p.ygrid.visible = False
    return p


def utilization(x: Series, x_range: Range1d, gpus: bool = False) -> Any:
    busy, cap = (x.busy_gpus, x.gpu_slots) if gpus else (x.busy_cores, x.slots)
    assert busy is not None and cap is not None
    what = "GPUs" if gpus else "cores"
    width = x.span / len(busy)
    p = _fig(f"Utilization over time: {what} busy and {what} offered by the agents "
             f"(mean per {width:.3g} s)", x_range, 300, what)
    c = (x.edges[:-1] + x.edges[1:]) / 2
    util = np.divide(busy, cap, out=np.zeros_like(busy), where=cap > 0) * 100
    src = ColumnDataSource({"t": c, "busy": busy, "cap": cap, "util": util})
    p.varea_step(x="t", y1=0, y2="busy", source=src, step_mode="center",
                     fill_color="#1f77b4", fill_alpha=0.6, legend_label=f"{what} busy")
    p.step(x="t", y="cap", source=src, mode="center", color="black", line_width=1.5,
           legend_label=f"{what} offered (agents' {'GPUs' if gpus else 'slots'})")
    line = p.line(x="t", y="busy", source=src, alpha=0)  # hover target (varea has none)
    p.add_tools(HoverTool(renderers=[line], mode="vline", tooltips=[
        ("at", "@t{0.00} s"), ("busy", "@busy{0.0}"), ("offered", "@cap{0.0}"),
        ("utilization", "@util{0.0} %")]))
    p.y_range.start = 0
    _legend(p, "above")
    return p


def queue(x: Series, x_range: Range1d) -> Any:
    width = x.span / len(x.busy_cores)
    p = _fig(f"Queue length over time (mean per {width:.3g} s)", x_range, 300, "tasks")
    c = (x.edges[:-1] + x.edges[1:]) / 2
    data = {"t": c, **{f"q{i}": v for i, v in enumerate(x.queue.values())}}
    src = ColumnDataSource(data)
    colors = ["#ff7f0e", "#2ca02c", "#1f77b4"]
    lines = []
    for i, (label, color) in enumerate(zip(x.queue, colors, strict=True)):
        lines.append(p.step(x="t", y=f"q{i}", source=src, mode="center", color=color,
                            line_width=1.8, legend_label=label))
    p.add_tools(HoverTool(renderers=lines[:1], mode="vline", tooltips=[
        ("at", "@t{0.00} s"), *((label, f"@q{i}{{0.0}}") for i, label in enumerate(x.queue))]))
    p.y_range.start = 0
    _legend(p, "above")
    return p


def histogram(h: Hist, title: str, colors: dict[str, str]) -> Any:
    p = _fig(title, None, 300, "attempts",
             x_label="seconds (log scale)" if h.log else "seconds",
             x_axis_type="log" if h.log else "linear")
    lines = []
    for name, counts in h.counts.items():
        y = np.append(counts, counts[-1])
        src = ColumnDataSource({"x": h.edges, "y": y, "hi": np.append(h.edges[1:], h.edges[-1])})
        lines.append(p.step(x="x", y="y", source=src, mode="after", line_width=2,
                            color=colors.get(name, OTHER), legend_label=f"{name} (n={h.n[name]:,})"))
    p.add_tools(HoverTool(renderers=lines, tooltips=[
        ("", "$name"), ("from", "@x{0.000000} s"), ("to", "@hi{0.000000} s"), ("attempts", "@y")]))
    for r, name in zip(lines, h.counts, strict=True):
        r.name = name
    p.y_range.start = 0
    _legend(p)
    return p


def failures(x: Series, x_range: Range1d) -> Any:
    width = float(x.fail_edges[1] - x.fail_edges[0])
    p = _fig(f"Failed attempts over time, by how they failed (per {width:.3g} s)", x_range,
             280, "failed attempts")
    c = (x.fail_edges[:-1] + x.fail_edges[1:]) / 2
    kinds = list(x.failures)
    src = ColumnDataSource({"t": c, **{k: v for k, v in x.failures.items()}})
    colors = [STATUS_COLORS.get(k, OTHER) for k in kinds]
    rs = p.vbar_stack(kinds, x="t", width=width * 0.9, source=src, color=colors,
                      legend_label=kinds)
    p.add_tools(HoverTool(renderers=rs, tooltips=[("at", "@t{0.00} s"),
                                                  *((k, f"@{{{k}}}") for k in kinds)]))
    p.y_range.start = 0
    _legend(p, "above")
    return p
