"""`shoal head` and `shoal agent`: a runtime across nodes started by hand.

    node0$ shoal head --connection-file run.json         # prints where it listens
    nodeN$ shoal agent --connect run.json                # on every node (shared file system)
    client: Executor(connect="run.json")  or  python -m shoal --connect run.json prog.py
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from typing import Any

from shoal._sys import stop_on_signals
from shoal.transport.connfile import Connection


def add_parser(sub: Any) -> None:
    h = sub.add_parser("head", help="start a head and write its connection file")
    h.add_argument("--connection-file", default="shoal-connection.json",
                   help="where to write the connection file (mode 0600)")
    h.add_argument("--bind", default="tcp://*:0",
                   help="ZeroMQ endpoint to listen on (default tcp://*:0, a free port)")
    h.add_argument("--host", default=None,
                   help="host name or address agents and clients use (default: this host's name)")
    h.add_argument("--prefetch", type=int, default=1, help="tasks queued per slot (default 1)")
    h.set_defaults(func=head_command)

    a = sub.add_parser("agent", help="join a head as this node's agent")
    a.add_argument("--connect", required=True, metavar="FILE", help="the head's connection file")
    a.add_argument("--slots", type=int, help="cores offered (default: all cores)")
    a.add_argument("--workers", type=int, help="warm Python workers (default: slots)")
    a.add_argument("--name", help="agent name (default: agent-HOST-PID-XXXX)")
    a.set_defaults(func=agent_command)


def head_command(args: argparse.Namespace) -> int:
    from shoal.head.server import Head

    logging.basicConfig(level=logging.INFO, format="shoal head: %(message)s")
    conn = Connection.new(args.bind)
    head = Head(conn, bind=args.bind, prefetch=args.prefetch)
    endpoint = head.address
    proto, _, rest = endpoint.partition("://")
    if proto == "tcp":
        host, _, port = rest.rpartition(":")
        if host in ("0.0.0.0", "*", "[::]", "::"):
            host = args.host or socket.gethostname()
        elif args.host:
            host = args.host
        endpoint = f"tcp://{host}:{port}"
    conn.address = endpoint
    conn.write(args.connection_file)
    print(f"shoal head listening on {endpoint}; connection file {os.path.abspath(args.connection_file)}",
          flush=True)

    stop_on_signals(head)
    head.serve()
    return 0


def agent_command(args: argparse.Namespace) -> int:
    from shoal.agent.agent import Agent

    logging.basicConfig(level=logging.INFO, format="shoal agent: %(message)s")
    try:
        conn = Connection.read(args.connect)
    except (OSError, ValueError) as exc:
        print(f"shoal agent: {exc}", file=sys.stderr)
        return 2
    agent = Agent(conn.address, conn.key, slots=args.slots, workers=args.workers, name=args.name,
                  sys_path=[os.getcwd()])

    stop_on_signals(agent)
    agent.run()
    return 0
