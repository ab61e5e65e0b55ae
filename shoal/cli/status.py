"""`shoal status --connect FILE`: what a running head is doing now.

Its agents (name, node, slots and how many are busy, GPUs, tasks running and queued
there), its queue (ready, waiting on dependencies, waiting to be retried), totals (done,
failed, retried), the completion rate, and the last failed attempts (task, agent, why,
when). ``--watch`` redraws it every few seconds; ``--json`` prints it for programs (one
JSON object; with ``--watch``, one per line). See docs/status.md.

It joins the head as a client (as ``Executor(connect=FILE)`` does), asks, and leaves;
the head's other clients and their tasks are not touched.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

DEFAULT_FAILURES = 10
DEFAULT_AGENTS = 40


def add_parser(sub: Any) -> None:
    p = sub.add_parser("status", help="show a running head's agents, queue and recent failures",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connect", required=True, metavar="FILE",
                   help="the head's connection file (shoal head --connection-file)")
    p.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                   help="redraw every SECONDS (default 2) until Ctrl-C")
    p.add_argument("--json", action="store_true",
                   help="print the status as JSON (with --watch: one object per line)")
    p.add_argument("--failures", type=int, default=DEFAULT_FAILURES, metavar="N",
                   help=f"recent failed attempts to show (default {DEFAULT_FAILURES}; the "
                        "head keeps the last 200)")
    p.add_argument("--agents", type=int, default=DEFAULT_AGENTS, metavar="N",
                   help=f"agents to list, busiest first (default {DEFAULT_AGENTS}; 0: all; "
                        "--json lists all)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="give up when the head does not answer within SECONDS (default 10)")
    p.set_defaults(func=status_command)


def status_command(args: argparse.Namespace) -> int:
    if args.watch is not None and not args.watch > 0:
        _say(f"--watch must be a number of seconds > 0, not {args.watch:g}")
        return 2
    if args.failures < 0:
        _say(f"--failures must be at least 0, not {args.failures}")
        return 2
    if args.agents < 0:
        _say(f"--agents must be at least 0, not {args.agents}")
        return 2
    if not args.timeout > 0:
        _say(f"--timeout must be a number of seconds > 0, not {args.timeout:g}")
        return 2
    from shoal.client.executor import Executor
    from shoal.task.errors import ExecutorError

    try:
        ex = Executor(connect=args.connect, start_timeout=args.timeout, progress=False)
    except (OSError, ValueError) as exc:  # a bad connection file: its message names it
        _say(str(exc))
        return 2
    except ExecutorError as exc:
        _say(str(exc))
        return 3
    where = ex._conn.address
    try:
        if args.watch is None:
            st = ex.status(failures=args.failures, timeout=args.timeout)
            if args.json:
                print(json.dumps(st, sort_keys=True))
            else:
                from rich.console import Console

                Console(highlight=False).print(render(st, where, args.agents))
            return 0
        return _watch(ex, args, where)
    except ExecutorError as exc:  # HeadLost is one: the head went away
        _say(str(exc).splitlines()[0])
        return 3
    except KeyboardInterrupt:
        return 0
    finally:
        ex.shutdown(wait=False)
        ex._terminate()


def _watch(ex: Any, args: argparse.Namespace, where: str) -> int:
    if args.json:
        while True:
            st = ex.status(failures=args.failures, timeout=args.timeout)
            print(json.dumps(st, sort_keys=True), flush=True)
            time.sleep(args.watch)
    from rich.console import Console
    from rich.live import Live

    console = Console(highlight=False)
    st = ex.status(failures=args.failures, timeout=args.timeout)
    if not console.is_terminal:  # no redrawing in a pipe or a file: one block each time
        while True:
            console.print(render(st, where, args.agents))
            console.print()
            console.file.flush()
            time.sleep(args.watch)
            st = ex.status(failures=args.failures, timeout=args.timeout)
    with Live(render(st, where, args.agents), console=console, auto_refresh=False, screen=False) as live:
        while True:
            time.sleep(args.watch)
            st = ex.status(failures=args.failures, timeout=args.timeout)
            live.update(render(st, where, args.agents), refresh=True)


def _say(message: str) -> None:
    print(f"shoal status: {message}", file=sys.stderr, flush=True)


def _ago(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s ago"
    return f"{s // 3600}h{s % 3600 // 60:02d}m ago"


def _clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _bytes(n: int) -> str:
    return f"{n / 2**30:.1f}G" if n else "-"


def render(st: dict[str, Any], where: str = "", max_agents: int = DEFAULT_AGENTS) -> Any:
    """The status answer (``Executor.status()``) as rich tables: totals, agents (at most
    ``max_agents``, busiest first, the others counted; 0: all), failures."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    q = st.get("queue") or {}
    slots = int(st.get("slots") or 0)
    busy = int(st.get("busy") or 0)
    gpus = int(st.get("gpus") or 0)
    head = Text.assemble(
        ("shoal head", "bold"), f" {where}" if where else "",
        f"  up {_clock(st.get('uptime') or 0)}",
        f"  {st.get('agents', 0)} agent{'s' * (st.get('agents', 0) != 1)}",
        f", {busy}/{slots} cores busy",
        f", {st.get('gpus_used', 0)}/{gpus} GPUs busy" if gpus else "",
        ("  (dispatch paused: waiting for agents)", "yellow") if st.get("paused") else "",
    )
    totals = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in ("done", "failed", "retried", "running", "on agents", "ready", "waiting (deps)",
                "backoff", "rate"):
        totals.add_column(col, justify="right")
    failed = int(st.get("failed") or 0)
    totals.add_row(
        f"{st.get('completed', 0):,}", Text(f"{failed:,}", style="red" if failed else ""),
        f"{st.get('retried', 0):,}", f"{st.get('running', 0):,}", f"{st.get('dispatched', 0):,}",
        f"{q.get('ready', 0):,}", f"{q.get('waiting', 0):,}", f"{q.get('backoff', 0):,}",
        f"{st.get('rate', 0.0):,.1f}/s",
    )
    parts: list[Any] = [head, totals]
    agents = st.get("agent_list")
    if agents is not None:
        at = Table(title="agents", title_justify="left", show_header=True, header_style="bold")
        for col, just in (("name", "left"), ("node", "left"), ("slots", "right"), ("busy", "right"),
                          ("GPUs", "right"), ("memory", "right"), ("running", "right"),
                          ("queued there", "right")):
            at.add_column(col, justify=just)  # type: ignore[arg-type]
        shown = agents
        if max_agents and len(agents) > max_agents:  # a big allocation: the busiest
            shown = sorted(agents, key=lambda a: (-a.get("running", 0) - a.get("queued", 0),
                                                  a["name"]))[:max_agents]
        for a in shown:
            name = a["name"] + (" (draining)" if a.get("draining") else "")
            g = f"{a.get('gpus_used', 0)}/{a['gpus']}" if a.get("gpus") else "-"
            mem = (f"{_bytes(a.get('memory_used', 0))}/{_bytes(a['memory'])}"
                   if a.get("memory") else "-")
            at.add_row(name, a.get("node") or a.get("host") or "", str(a["slots"]),
                       str(a.get("busy", 0)), g, mem, str(a.get("running", 0)),
                       str(a.get("queued", 0)))
        if not agents:
            at.add_row("(none)", "", "", "", "", "", "", "")
        elif len(shown) < len(agents):
            idle = sum(1 for a in agents if not a.get("running") and not a.get("queued"))
            more = len(agents) - len(shown)
            at.caption = (f"and {more} more agent{'s' * (more != 1)} ({idle} of all "
                          f"{len(agents)} idle; --agents 0 lists all)")
            at.caption_justify = "left"
        parts.append(at)
    failures = st.get("failures") or []
    now = float(st.get("time") or time.time())
    if failures:
        ft = Table(title=f"recent failures (newest last; {st.get('failed_attempts', 0):,} failed "
                         "attempts in all)", title_justify="left", show_header=True,
                   header_style="bold")
        for col in ("when", "task", "agent", "attempt", "why"):
            ft.add_column(col, overflow="fold")
        for f in failures:
            at_clock = time.strftime("%H:%M:%S", time.localtime(f["time"]))
            why = f["why"] + (" (retried)" if f.get("retried") else "")
            ft.add_row(f"{at_clock} ({_ago(now - f['time'])})", f["task"], f["agent"],
                       str(f.get("attempt", "")), why)
        parts.append(ft)
    else:
        parts.append(Text("no failed attempts", style="green"))
    return Group(*parts)
