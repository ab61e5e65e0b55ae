"""`shoal trace FILE`: the report of a task trace (shoal.trace.report); `shoal report FILE
-o report.html`: the same run as one self-contained HTML page (shoal.trace.html)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    from shoal.trace.report import add_arguments, run

    p = sub.add_parser("trace", help="report on a trace file (makespan, utilization, setup time)")
    add_arguments(p)
    p.set_defaults(func=run)
    p = sub.add_parser("report", help="an HTML page about a trace file (timeline, utilization, "
                                      "queues, setup and run times, failures)",
                       description="Write one self-contained HTML page (opens offline) about "
                                   "one run of a trace file: see docs/report.md.")
    p.add_argument("file", help="a trace written with --trace FILE")
    p.add_argument("-o", "--output", metavar="HTML",
                   help="the page to write (default: the trace's name with .html)")
    p.add_argument("--run", type=int, default=-1, metavar="N",
                   help="which head run of the file (1-based; default: the last)")
    p.set_defaults(func=report)


def report(args: argparse.Namespace) -> int:
    """`shoal report FILE [-o HTML] [--run N]`."""
    from shoal.trace.html import cli

    return cli(args.file, args.output, args.run, "report")
