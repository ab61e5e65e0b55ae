"""The HTML report (`shoal report`) at 100,000 tasks: page size, time to build, time to draw.

    PYTHONPATH=. python bench/report_bench.py [--tasks 100000] [--reps 3]

With --demo PNG: the small real run of docs/img/report.png instead (see demo()).

Three traces of --tasks tasks each:
- W1: a real traced run, ``Executor(trace=...)`` (the local default: 2 slots) running one
  no-op ``submit`` per task (the worst case for a report: tiny tasks, 2 lanes);
- 256x40: a trace written in the store's format (:mod:`shoal.trace.store`) for 256 agents
  of 40 slots running tasks of 1-10 s, as the simulator writes it (virtual time), with 1%
  of tasks failing once and retried;
- 2048x128: the same on 2,048 agents of 128 slots (agents grouped on the timeline).

For each: the trace's size, the time to build the page (``shoal.trace.html.write_html``:
reading, summary, binning, Bokeh), the page's size, and the time Debian's chromium
(headless, driven by Playwright, offline) takes from navigation until Bokeh reports every
figure drawn; medians of --reps. Needs the extras ``report`` and ``test`` and
/usr/bin/chromium (scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict, deque

import msgpack

from shoal.trace.store import (
    AGENT_JOIN,
    AGENT_LEAVE,
    CLIENT_JOIN,
    END,
    FUNCS,
    RESULTS,
    SUBMIT,
    VERSION,
)

CHROMIUM = "/usr/bin/chromium"
READY = ("() => window.Bokeh && Bokeh.documents.length > 0 && "
         "Bokeh.documents.every(d => d.is_idle)")


def write_synthetic(path: str, tasks: int, agents: int, slots: int, seed: int = 1,
                    fail: float = 0.01, run_s: tuple[float, float] = (1.0, 10.0),
                    gpus: int = 0) -> None:
    """A trace in the store's format of ``tasks`` one-core Python tasks of ``run_s``
    seconds on ``agents`` agents of ``slots`` slots, placed earliest-free-slot first, in
    virtual time (the way a simulator writes one); a ``fail`` share fails its first
    attempt (ValueError) and runs again. Results come back per agent every 0.5 s. With
    ``gpus``, agents offer that many GPUs and every 32nd task asks for one (not placed by
    GPU: a figure's input, not a schedule)."""
    rng = random.Random(seed)
    t0 = 1_800_000_000.0
    tids = list(range(1, tasks + 1))
    free = [(t0 + 0.01, a, s) for a in range(1, agents + 1) for s in range(slots)]
    heapq.heapify(free)
    done: dict[tuple[int, int], list[list[object]]] = defaultdict(list)
    queue = deque((tid, 1, t0) for tid in tids)   # (tid, attempt, ready at)
    end_t = t0
    while queue:
        tid, attempt, ready = queue.popleft()
        at, agent, slot = heapq.heappop(free)
        disp = max(at, ready) + rng.uniform(0.0005, 0.002)
        start = disp + rng.uniform(0.0005, 0.003)
        dur = rng.uniform(*run_s)
        failed = attempt == 1 and rng.random() < fail
        if failed:
            dur *= rng.random()
        end = start + dur
        if failed:  # runs again once its failure is back, after the first attempts
            queue.append((tid, 2, end + 0.5))
        heapq.heappush(free, (end, agent, slot))
        rec = (int((end - t0) / 0.5) + 1) * 0.5 + t0
        done[(agent, int(rec * 2))].append([tid, 1 if failed else 0, attempt, disp,
                                            [start - 0.0002, start, end, None, None, slot],
                                            {"why": "ValueError: synthetic",
                                             "types": ["ValueError"]} if failed else None,
                                            rec])
        end_t = max(end_t, rec)
    pack = msgpack.Packer(use_bin_type=True).pack
    with open(path, "wb") as fh:
        fh.write(pack({"shoal_trace": VERSION, "t": t0, "pid": os.getpid(),
                       "host": socket.gethostname(), "run_id": "synthetic"}))
        first = [[AGENT_JOIN, t0, a, f"a{a:04d}", f"n{a:04d}", slots, gpus, 0, "sim", None]
                 for a in range(1, agents + 1)]
        requests = [[1, 0] if tid % 32 == 0 else None for tid in tids] if gpus else None
        first += [[FUNCS, {1: "sim.work"}], [CLIENT_JOIN, t0, 1, "client", "sim", None],
                  [SUBMIT, t0, tids, 1, 0, 1, 1, requests]]
        fh.write(pack(first))
        rows = []
        for (agent, _), items in sorted(done.items(), key=lambda kv: kv[1][0][6]):
            infos = [it[5] for it in items]
            rows.append([RESULTS, items[0][6], agent, [it[0] for it in items],
                         [it[1] for it in items], [it[2] for it in items],
                         [it[3] for it in items], [it[4] for it in items],
                         infos if any(infos) else None])
            if len(rows) >= 1000:
                fh.write(pack(rows))
                rows = []
        rows += [[AGENT_LEAVE, end_t, a, "the head stopped", False] for a in range(1, agents + 1)]
        rows.append([END, end_t, {}])
        fh.write(pack(rows))


def write_w1(path: str, tasks: int) -> None:
    """A real traced run: one no-op submit per task on the local default."""
    code = ("import sys\nfrom shoal import Executor\n"
            "def inc(x):\n    return x + 1\n"
            "with Executor(trace=sys.argv[1]) as ex:\n"
            "    fs = [ex.submit(inc, i) for i in range(int(sys.argv[2]))]\n"
            "    assert sum(f.result() for f in fs) > 0\n")
    subprocess.run([sys.executable, "-c", code, path, str(tasks)], check=True)


def simulate(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def analyse(n: int) -> int:
    return sum(i * i for i in range(n))


def fetch(i: int) -> int:
    if random.random() < 0.3:
        raise ConnectionError(f"input {i} not there yet")
    time.sleep(0.1)
    return i


def demo(trace: str) -> None:
    """The run of docs/img/report.png: `shoal head --trace` and two agents of 2 slots on
    loopback; naps, CPU work, commands, a task that fails at random (retries=3) and a
    command that exits 1."""
    from shoal import Command, Executor

    tmp = tempfile.mkdtemp(prefix="rdemo")
    conn = os.path.join(tmp, "run.json")
    py = [sys.executable, "-m", "shoal"]
    procs = [subprocess.Popen([*py, "head", "--bind", "tcp://127.0.0.1:0", "--connection-file",
                               conn, "--trace", trace], stderr=subprocess.DEVNULL)]
    try:
        while not os.path.exists(conn):
            time.sleep(0.05)
        procs += [subprocess.Popen([*py, "agent", "--connect", conn, "--name", n, "--slots",
                                    "2"], stderr=subprocess.DEVNULL) for n in ("node1", "node2")]
        with Executor(connect=conn) as ex:
            while len(ex.agents()) < 2:
                time.sleep(0.1)
            rng = random.Random(4)
            fs = [ex.submit(simulate, rng.uniform(0.2, 1.2)) for _ in range(24)]
            fs += [ex.options(retries=3).submit(fetch, i) for i in range(10)]
            fs += [ex.submit(Command(f"sleep {rng.uniform(0.3, 0.8):.2f}")) for _ in range(6)]
            fs += [ex.submit(analyse, rng.randint(200_000, 3_000_000)) for _ in range(16)]
            fs.append(ex.submit(Command("grep -q needle /etc/hostname")))
            for f in fs:
                try:
                    f.result()
                except Exception:
                    pass
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def render_s(browser: object, page_path: str) -> float:
    """Seconds from navigation to every Bokeh figure drawn, in a fresh offline page; fails
    on a console error or a request that leaves the file."""
    ctx = browser.new_context(offline=True, viewport={"width": 1300, "height": 900})  # type: ignore[attr-defined]
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append(r.url) if not r.url.startswith("file:") else None)
    page.goto("file://" + os.path.abspath(page_path))
    page.wait_for_function(READY, timeout=120_000, polling=50)
    ms = page.evaluate("performance.now()")
    ctx.close()
    if errors:
        raise RuntimeError(f"{page_path}: {errors[:3]}")
    return ms / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="keep the traces and pages here")
    ap.add_argument("--demo", metavar="PNG", help="instead: run the demo (see demo()), write "
                    "its report and a screenshot of the whole page to PNG (docs/img/report.png)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from shoal.trace import summary
    from shoal.trace.html import write_html

    if args.demo:
        with tempfile.TemporaryDirectory() as tmp:
            trace, page = os.path.join(tmp, "demo.trace"), os.path.join(tmp, "report.html")
            demo(trace)
            write_html(trace, page)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                render_s(browser, page)
                view = browser.new_page(viewport={"width": 1300, "height": 900})
                view.goto("file://" + page)
                view.wait_for_function(READY, timeout=60_000)
                view.screenshot(path=args.demo, full_page=True)
                browser.close()
        print(f"wrote {args.demo}")
        return 0

    work = args.keep or tempfile.mkdtemp(prefix="rbench")
    os.makedirs(work, exist_ok=True)
    cases = {"W1 (real, 2 slots)": lambda p: write_w1(p, args.tasks),
             "256 agents x 40": lambda p: write_synthetic(p, args.tasks, 256, 40),
             "2,048 agents x 128": lambda p: write_synthetic(p, args.tasks, 2048, 128)}
    rows = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            for i, (name, make) in enumerate(cases.items()):
                trace = os.path.join(work, f"case{i}.trace")
                page = os.path.join(work, f"case{i}.html")
                make(trace)
                s = summary(trace)
                builds, renders = [], []
                for _ in range(args.reps):
                    t = time.perf_counter()
                    size = write_html(trace, page)
                    builds.append(time.perf_counter() - t)
                    renders.append(render_s(browser, page))
                rows.append((name, s["attempts"], os.path.getsize(trace), size,
                             statistics.median(builds), statistics.median(renders)))
                print(f"{name}: built in {builds}, drawn in {renders}", file=sys.stderr,
                      flush=True)
            browser.close()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nreport bench (median of {args.reps}; {os.cpu_count()} cores)")
    print(f"{'trace':<22}{'attempts':>10}{'trace MB':>10}{'page MB':>9}{'build s':>9}"
          f"{'draw s':>8}")
    for name, n, tsize, psize, b, r in rows:
        print(f"{name:<22}{n:>10,}{tsize / 1e6:>10.1f}{psize / 1e6:>9.2f}{b:>9.2f}{r:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
