"""``python -m shoal.head``: run a head (used by the local default and `shoal head`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from shoal._sys import set_parent_death_signal, stop_on_signals
from shoal.head.core import tune_gc
from shoal.head.journal import JournalError
from shoal.head.server import Head
from shoal.trace.store import TraceError
from shoal.transport.connfile import Connection


def main(argv: list[str] | None = None, connection: Connection | None = None) -> int:
    """``connection``: the run's connection, already read (shoal.launch.boot); else the
    ``--connection`` file is read."""
    ap = argparse.ArgumentParser(prog="python -m shoal.head")
    ap.add_argument("--connection", required=True, help="connection file to read")
    ap.add_argument("--bind", help="endpoint to bind instead of the file's address")
    ap.add_argument("--owner-pid", type=int, help="stop when this process dies")
    ap.add_argument("--prefetch", type=int, default=1)
    ap.add_argument("--exit-when-idle", action="store_true")
    ap.add_argument("--heartbeat-timeout", type=float, default=None, metavar="S",
                    help="a peer silent this long is lost (default 8)")
    ap.add_argument("--crash-limit", type=int, default=3, metavar="N",
                    help="a task lost this many times in a row fails (default 3)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--journal", metavar="FILE",
                    help="SQLite journal: record keyed tasks, answer those finished OK in an "
                         "earlier run from it (docs/journal.md)")
    ap.add_argument("--trace", metavar="FILE",
                    help="record every attempt of every task in FILE (`shoal trace FILE` reports)")
    ap.add_argument("--remove-dir", action="store_true",
                    help="remove the connection file's directory at exit (the local default's "
                         "run directory, so a caller that crashed leaves nothing behind)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="shoal head: %(message)s")
    if args.owner_pid:
        set_parent_death_signal()
    tune_gc()  # this process is the head: its collector suits a table of live tasks
    try:
        try:
            if connection is None:
                connection = Connection.read(args.connection)
            head = Head(connection, bind=args.bind, prefetch=args.prefetch,
                        owner_pid=args.owner_pid, exit_when_idle=args.exit_when_idle,
                        heartbeat_timeout=args.heartbeat_timeout, crash_limit=args.crash_limit,
                        journal=args.journal, trace=args.trace)
        except (OSError, ValueError, JournalError, TraceError) as exc:
            print(f"shoal head: {exc}", file=sys.stderr)
            return 2
        stop_on_signals(head)
        head.serve()
    finally:
        if args.remove_dir:
            import shutil

            shutil.rmtree(os.path.dirname(os.path.abspath(args.connection)), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
