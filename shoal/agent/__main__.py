"""``python -m shoal.agent``: run a node agent (used by the local default and `shoal agent`)."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from shoal._sys import stop_on_signals
from shoal.agent import limits
from shoal.agent.agent import Agent
from shoal.transport.connfile import Connection


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shoal.agent")
    ap.add_argument("--connection", required=True, help="connection file of the head")
    ap.add_argument("--slots", type=int, help="cores this agent offers (default: all)")
    ap.add_argument("--workers", type=int, help="warm Python workers (default: slots)")
    ap.add_argument("--name", help="agent name (default: agent-HOST-PID-XXXX)")
    ap.add_argument("--owner-pid", type=int, help="stop when this process dies")
    ap.add_argument("--sys-path", help="JSON list of import paths for workers")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--max-output", metavar="SIZE", help=limits.OUTPUT_HELP)
    ap.add_argument("--max-result", metavar="SIZE", help=limits.RESULT_HELP)
    args = ap.parse_args(argv)
    try:
        limits.check_counts(args.slots, args.workers)
        limits.configure(*limits.from_args(args.max_output, args.max_result))
    except ValueError as exc:
        print(f"python -m shoal.agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="shoal agent: %(message)s")
    conn = Connection.read(args.connection)
    agent = Agent(conn.address, conn.key, slots=args.slots, workers=args.workers, name=args.name,
                  owner_pid=args.owner_pid,
                  sys_path=json.loads(args.sys_path) if args.sys_path else None)

    stop_on_signals(agent)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
