"""The HTML report (`shoal report`), loaded in a real browser.

A real traced run (module fixture: ``Executor(trace=...)`` on the local default: naps, a
map, a command exiting 3, a task that fails once and then succeeds, one that fails on both
of its attempts) gives the page most tests read. Debian's chromium (scripts/setup.sh
installs it) opens the page from file:// in an offline context, driven by Playwright's
Python package pointed at /usr/bin/chromium (Playwright's own browsers are never
downloaded). Also: the binning against a direct computation, a 100,000-task trace of
2,048 agents (aggregated: the page stays small and draws), the CLI, and the one-line
error when the extra is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from shoal import Command, Executor, trace

np = pytest.importorskip("numpy")
pytest.importorskip("bokeh", reason="the extra 'report' (bokeh) is not installed")

from shoal.trace import bins  # noqa: E402
from shoal.trace.html import write_html  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bench/report_bench.py, loaded by path (bench/ on sys.path would shadow modules such as
# "run" or "common" for the rest of the session)
_spec = importlib.util.spec_from_file_location("report_bench",
                                               os.path.join(ROOT, "bench", "report_bench.py"))
assert _spec is not None and _spec.loader is not None
report_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_bench)
READY, write_synthetic = report_bench.READY, report_bench.write_synthetic

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
CHROMIUM = "/usr/bin/chromium"
FIGURES = {"timeline", "utilization", "queue", "setup", "runtime", "failures"}

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def once(marker: str) -> str:
    """Fails the first time (leaves ``marker``), succeeds the next."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first attempt fails")
    return "ok"


def boom(x: int) -> None:
    raise ValueError(f"boom {x}")


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(trace, page) of a real run with failures and retries."""
    tmp = tmp_path_factory.mktemp("report")
    path = tmp / "run.trace"
    with Executor(trace=str(path)) as ex:
        fs = [ex.submit(nap, 0.02 + 0.01 * (i % 5)) for i in range(12)]
        fs.append(ex.options(retries=1).submit(once, str(tmp / "marker")))
        bad = ex.options(retries=1).submit(boom, 7)
        fs.append(ex.submit(Command("exit 3")))
        fs.append(ex.submit(Command(["sleep", "0.05"])))
        assert list(ex.map(nap, [0.01] * 20, chunksize=5)) == [0.01] * 20
        for f in fs:
            f.result()
        with pytest.raises(ValueError):
            bad.result()
    page = tmp / "report.html"
    write_html(path, page)
    return path, page


def _browser_or_skip() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("playwright is not installed (scripts/setup.sh installs it)")
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium")
        pytest.skip(f"{CHROMIUM} is missing (scripts/setup.sh installs it)")
    return sync_playwright


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_playwright = _browser_or_skip()
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Loaded:
    """A page loaded offline from file://, drawn; what it logged and asked for."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.ctx = browser.new_context(offline=True, viewport={"width": 1300, "height": 900})
        self.page = self.ctx.new_page()
        self.console: list[tuple[str, str]] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_function(READY, timeout=60_000, polling=50)

    def errors(self) -> list[tuple[str, str]]:
        return [(k, t) for k, t in self.console if k in ("error", "pageerror", "warning")]

    def drawn(self) -> dict[str, float]:
        """Per figure, the share of its largest canvas's pixels that are coloured (not
        white, grey or black: the data; axes, grid and text are grey)."""
        return self.page.evaluate("""() => {
          const deep = (root, out) => { for (const el of root.querySelectorAll('*')) {
            if (el.tagName === 'CANVAS') out.push(el); if (el.shadowRoot) deep(el.shadowRoot, out); }
            return out; };
          const res = {};
          for (const f of document.querySelectorAll('[data-figure]')) {
            const cs = deep(f, []).sort((a, b) => b.width * b.height - a.width * a.height);
            if (!cs.length) { res[f.dataset.figure] = 0; continue; }
            const c = cs[0], d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < d.length; i += 4) {
              const mx = Math.max(d[i], d[i+1], d[i+2]), mn = Math.min(d[i], d[i+1], d[i+2]);
              if (d[i+3] > 0 && mx - mn > 60) n++; }
            res[f.dataset.figure] = n / (c.width * c.height);
          }
          return res; }""")

    def sources(self) -> dict[str, int]:
        """Rows of the data source of each named glyph renderer (Bokeh's own models)."""
        return self.page.evaluate("""() => { const out = {};
          for (const d of Bokeh.documents) for (const m of d.all_models)
            if (m.type === 'GlyphRenderer' && m.name) out[m.name] = m.data_source.get_length();
          return out; }""")

    def close(self) -> None:
        self.ctx.close()


@pytest.fixture(scope="module")
def loaded(browser: Any, traced: tuple[Path, Path]) -> Iterator[Loaded]:
    page = Loaded(browser, traced[1])
    yield page
    page.close()


# ---- in the browser ---------------------------------------------------------------------

def test_page_loads_offline_without_errors_and_draws_every_figure(loaded: Loaded) -> None:
    assert loaded.errors() == [], loaded.errors()
    assert all(u.startswith("file://") for u in loaded.requests), loaded.requests
    drawn = loaded.drawn()
    assert set(drawn) == FIGURES
    for name, share in drawn.items():
        assert share > 0.002, f"figure {name}: {share:.4%} of its canvas coloured"


def test_summary_table_numbers_are_the_summary_of_the_trace(loaded: Loaded,
                                                            traced: tuple[Path, Path]) -> None:
    s = trace.summary(traced[0])
    cells = loaded.page.evaluate("""() => [...document.querySelectorAll('td[data-key]')]
        .map(td => [td.dataset.key, td.dataset.value, td.textContent])""")
    keys = {k for k, _, _ in cells}
    assert {"tasks", "ok", "failed", "attempts", "retried", "failed_attempts", "makespan_s",
            "cores.utilization", "setup_s.p50", "setup_s.p99", "head_latency_s.p90",
            "phases_s.launch.p50", "agents.0.tasks", "agents.0.busy_fraction"} <= keys
    for key, value, text in cells:
        want: Any = s
        for part in key.split("."):
            want = want[int(part)] if isinstance(want, list) else want[part]
        assert json.loads(value) == want, key
        if want is None:
            assert text == "-", key
            continue
        number = text.replace(",", "").split()[0].rstrip("%")
        decimals = len(number.split(".")[1]) if "." in number else 0
        scale = 100 if text.endswith("%") else 1e3 if text.endswith(" ms") else 1
        assert float(number) == pytest.approx(want * scale, abs=0.51 * 10 ** -decimals), key
    # the run's facts, as the fixture made them
    assert s["tasks"] >= 12 + 1 + 1 + 2 + 1 and (s["failed"], s["retried"]) == (2, 2)
    assert s["failed_attempts"] == 4  # once's first, boom's two, the command's exit 3


def test_failures_and_retries_are_listed(loaded: Loaded, traced: tuple[Path, Path]) -> None:
    rows = loaded.page.evaluate("""() => Object.fromEntries(['failures', 'retried'].map(id =>
        [id, [...document.querySelectorAll('#' + id + ' tbody tr')].map(tr =>
            [...tr.cells].map(td => td.textContent))]))""")
    failed = {(r[2].rsplit(".", 1)[-1], r[1], r[4], r[5]) for r in rows["failures"]}
    assert ("boom", "1", "error", "ValueError: boom 7") in failed
    assert ("boom", "2", "error", "ValueError: boom 7") in failed
    assert ("once", "1", "error", "RuntimeError: first attempt fails") in failed
    assert ("exit", "1", "ok", "exit 3") in failed
    retried = {r[1].rsplit(".", 1)[-1]: r for r in rows["retried"]}
    assert set(retried) == {"boom", "once"}
    assert retried["once"][2] == "2"
    assert retried["once"][3] == "error (RuntimeError: first attempt fails) / ok"


def test_timeline_has_a_bar_per_attempt_that_ran(loaded: Loaded,
                                                 traced: tuple[Path, Path]) -> None:
    t = trace.read(traced[0])
    ran = [a for a in t.attempts if a.started is not None and a.ended is not None]
    src = loaded.sources()
    assert src["attempts"] == len(ran)
    assert src["failed attempts"] == sum(1 for a in ran if a.failed)


def test_100k_tasks_on_2048_agents_aggregated_small_and_drawn(browser: Any,
                                                              tmp_path: Path) -> None:
    path, page = tmp_path / "big.trace", tmp_path / "big.html"
    write_synthetic(str(path), 100_000, 2048, 128, gpus=6)
    size = write_html(path, page)
    assert size < 3_000_000  # Bokeh's 1.3 MB and binned data, not 100,000 bars
    loaded = Loaded(browser, page)
    try:
        assert loaded.errors() == [], loaded.errors()
        drawn = loaded.drawn()
        assert set(drawn) == FIGURES | {"gpu-utilization"}
        assert all(v > 0.002 for v in drawn.values()), drawn
        assert "attempts" not in loaded.sources()  # no bar per attempt: the busy image
        assert loaded.sources()["busy"] == 1
        cells = dict(loaded.page.evaluate("""() => [...document.querySelectorAll(
            'td[data-key]')].map(td => [td.dataset.key, JSON.parse(td.dataset.value)])"""))
        s = trace.summary(path)
        assert cells["attempts"] == s["attempts"] > 100_000
        assert cells["gpus.utilization"] == s["gpus"]["utilization"] > 0
    finally:
        loaded.close()


# ---- without a browser --------------------------------------------------------------------

def test_level_is_the_time_weighted_mean_per_bin() -> None:
    rng = random.Random(3)
    starts = np.array([rng.uniform(-1, 10) for _ in range(300)])
    ends = starts + np.array([rng.choice([0.0, rng.uniform(0, 0.3), rng.uniform(0, 6)])
                              for _ in range(300)])
    weights = np.array([rng.randint(1, 4) for _ in range(300)], dtype=float)
    rows = np.array([rng.randrange(3) for _ in range(300)])
    edges = np.linspace(0.0, 9.0, 37)
    got = bins.level(starts, ends, edges, weights, rows, 3)
    want = np.zeros((3, 36))
    for s, e, w, r in zip(starts, ends, weights, rows, strict=True):
        for j in range(36):
            want[r, j] += w * max(0.0, min(e, edges[j + 1]) - max(s, edges[j])) / 0.25
    assert np.allclose(got, want)


def test_series_add_up_to_the_summary(traced: tuple[Path, Path]) -> None:
    """The utilization figure's areas are the summary's busy core-seconds and slot-seconds
    (the same definitions, binned); the queue's running line is the attempts that ran."""
    t = trace.read(traced[0])
    s = trace.summary(t)
    x = bins.series(t, s)
    width = x.span / bins.TIME_BINS
    assert x.busy_cores.sum() * width == pytest.approx(s["cores"]["busy_core_s"], rel=1e-6)
    assert x.slots.sum() * width == pytest.approx(s["cores"]["slot_s"], rel=1e-6)
    ran = sum(a.ended - a.started for a in t.attempts if a.started and a.ended)
    assert x.queue["running"].sum() * width == pytest.approx(ran, rel=1e-6)
    assert sum(int(v.sum()) for v in x.failures.values()) == s["failed_attempts"]
    assert sum(r["attempts"] for r in x.by_name) == s["attempts"]


def test_lanes_never_overlap_and_number_the_most_at_once() -> None:
    rng = random.Random(5)
    groups = [rng.choice("ab") for _ in range(500)]
    starts = [rng.uniform(0, 100) for _ in range(500)]
    ends = [s + rng.uniform(0, 5) for s in starts]
    lane, counts = bins.assign_lanes(groups, starts, ends)
    for g in "ab":
        mine = [i for i in range(500) if groups[i] == g]
        for k in set(lane[i] for i in mine):
            spans = sorted((starts[i], ends[i]) for i in mine if lane[i] == k)
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
        most = max(sum(1 for i in mine if starts[i] <= starts[j] < ends[i]) for j in mine)
        assert counts[g] == most


def test_timeline_bins_each_slot_past_the_bar_limit(tmp_path: Path) -> None:
    path = tmp_path / "mid.trace"
    write_synthetic(str(path), bins.GANTT_DETAIL + 500, 4, 8, run_s=(0.01, 0.2))
    t = trace.read(path)
    x = bins.series(t, trace.summary(t))
    g = x.gantt
    assert g is not None and g.bars is None and g.unit == "slot"
    assert g.image.shape == (len(g.rows), bins.TIME_BINS) and len(g.rows) == 32
    # the image's mean busy share is the trace's core utilization
    util = trace.summary(t)["cores"]["utilization"]
    assert g.image.mean() / 100 == pytest.approx(util, abs=0.01)


def _shoal(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [PY, "-c", code, *args] if code else [PY, "-m", "shoal", *args]
    return subprocess.run(cmd, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_cli_report_and_trace_html(traced: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "a.html"
    r = _shoal("report", str(traced[0]), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote {out} (")
    r = _shoal("trace", str(traced[0]), "--html", str(tmp_path / "b.html"))
    assert r.returncode == 0, r.stderr
    a, b = out.read_text(), (tmp_path / "b.html").read_text()
    assert "<script" in a and not re.search(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=", a)
    facts = re.compile(r'data-(?:figure|key|value)="[^"]*"')
    assert facts.findall(a) == facts.findall(b) and len(facts.findall(a)) > 40
    bad = tmp_path / "bad.trace"
    bad.write_bytes(b"not a trace")
    r = _shoal("report", str(bad), "-o", str(tmp_path / "c.html"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "is not a shoal trace" in r.stderr
    r = _shoal("report", str(traced[0]), "-o", str(tmp_path / "no" / "dir.html"))
    assert r.returncode == 2 and "cannot write the report" in r.stderr
    assert r.stderr.count("\n") == 1


def test_missing_extra_is_one_line_naming_it(traced: tuple[Path, Path], tmp_path: Path) -> None:
    code = ("import sys; sys.modules['bokeh'] = None\n"  # as if not installed
            "from shoal.cli.main import main; sys.exit(main(sys.argv[1:]))")
    r = _shoal("report", str(traced[0]), "-o", str(tmp_path / "x.html"), code=code)
    assert r.returncode == 2, r.stderr
    assert r.stderr == ("shoal report: the HTML report needs bokeh (the optional extra "
                        "'report': pip install 'shoal[report]')\n")
    assert not (tmp_path / "x.html").exists()


def test_empty_run_gives_a_page_without_figures(tmp_path: Path) -> None:
    path = tmp_path / "empty.trace"
    with Executor(trace=str(path)) as ex:
        ex.agents()
    page = tmp_path / "empty.html"
    write_html(path, page)
    text = page.read_text()
    assert "No attempts in this run" in text and "data-figure=" not in text
    assert 'data-key="tasks" data-value="0"' in text
