"""`shoal head` and `shoal agent`: a runtime across nodes started by hand.

    node0$ shoal head --connection-file run.json         # prints where it listens
    nodeN$ shoal agent --connect run.json                # on every node (shared file system)
    client: Executor(connect="run.json")  or  python -m shoal --connect run.json prog.py

With ``--bundle ROOT`` (a node-local copy made by ``shoal bcast --to ROOT``) the command
re-executes itself with the interpreter in ROOT and the rerouted environment, so the
agent and every worker it forks import from node-local storage (docs/bundle.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from shoal._sys import stop_on_signals
from shoal.agent import limits
from shoal.transport.connfile import Connection, ConnectionFileError


def add_parser(sub: Any) -> None:
    h = sub.add_parser("head", help="start a head and write its connection file")
    h.add_argument("--connection-file", default="shoal-connection.json",
                   help="where to write the connection file (mode 0600)")
    h.add_argument("--bind", default=None,
                   help="ZeroMQ endpoint to listen on (default tcp://ADDRESS:0: a free port on "
                        "the address other hosts reach this one at - its host name resolved, "
                        "else the default route's - not on every interface)")
    h.add_argument("--host", default=None,
                   help="host name or address written to the connection file for agents and "
                        "clients (default: the address bound; this host's name for a wildcard)")
    h.add_argument("--encrypt", action=argparse.BooleanOptionalAction, default=None,
                   help="CURVE-encrypt the traffic of agents and clients with the head (default: "
                        "on for TCP on a non-loopback address, off for ipc:// and loopback)")
    h.add_argument("--prefetch", type=int, default=1, help="tasks queued per slot (default 1)")
    h.add_argument("--big-first", action="store_true",
                   help="tasks with resources (GPUs...) before older plain ones, larger first; "
                        "no prefetch while they wait (docs/sim.md)")
    h.add_argument("--plan", action="store_true",
                   help="lay tasks with estimates out over the agents in time and dispatch by "
                        "that plan (for tasks of minutes; docs/sim.md)")
    h.add_argument("--heartbeat-timeout", type=float, default=None, metavar="S",
                   help="an agent or client silent this long is lost (default 8 s)")
    h.add_argument("--crash-limit", type=int, default=3, metavar="N",
                   help="a task lost this many times in a row fails with TaskLost (default 3)")
    h.add_argument("--bundle", metavar="ROOT", help=BUNDLE_HELP)
    h.add_argument("--journal", metavar="FILE",
                   help="SQLite journal of keyed tasks: a head restarted on the same file answers "
                        "the tasks that finished OK from it (docs/journal.md)")
    h.add_argument("--trace", metavar="FILE",
                   help="record every attempt of every task (where, when, which cores) in FILE; "
                        "`shoal trace FILE` reports on it (docs/trace.md)")
    h.add_argument("--expect-agents", type=int, default=0, metavar="N",
                   help="dispatch nothing until N agents joined (or --expect-timeout passed), so "
                        "the first tasks spread over the whole allocation")
    h.add_argument("--expect-timeout", type=float, default=60.0, metavar="S",
                   help="with --expect-agents: start anyway after S seconds (default 60)")
    h.set_defaults(func=head_command)

    a = sub.add_parser("agent", help="join a head as this node's agent")
    a.add_argument("--connect", required=True, metavar="FILE", help="the head's connection file")
    a.add_argument("--slots", type=int, help="cores offered (default: the allocation's CPUs on "
                   "this node, else all cores)")
    a.add_argument("--workers", type=int, help="warm Python workers (default: slots)")
    a.add_argument("--name", help="agent name (default: agent-HOST-PID-XXXX)")
    a.add_argument("--max-output", metavar="SIZE", help=limits.OUTPUT_HELP)
    a.add_argument("--max-result", metavar="SIZE", help=limits.RESULT_HELP)
    a.add_argument("--bundle", metavar="ROOT", help=BUNDLE_HELP + "; workers import ROOT/app "
                   "(tier 3) instead of the current directory when it is there")
    from shoal.agent.__main__ import add_failure_options, add_resource_options

    add_failure_options(a)
    add_resource_options(a)
    a.set_defaults(func=agent_command)


BUNDLE_HELP = "run from the node-local bundle copy at ROOT (made by `shoal bcast --to ROOT`)"

# The re-executed process starts with this instead of ``-m shoal.cli.main``: ``-c`` and
# ``-m`` put the current directory first on sys.path, which would import shoal from a
# source checkout (or search the shared file system) instead of from ROOT.
_BOOT = ("import os,sys;p=sys.path;p and p[0] in ('',os.getcwd()) and p.pop(0);"
         "from shoal.cli.main import main;sys.exit(main())")
_REEXEC = "_SHOAL_BUNDLE_REEXEC"  # set for the re-executed process only, against loops


def _same(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def run_from_bundle(what: str, root: str, argv: list[str]) -> str | None:
    """Make this process run from the bundle at ``root``: return None when it already
    does, else replace it (``os.execve``) with ROOT's interpreter running ``shoal
    *argv`` in ``rerouted_environ(root)``; return an error message when that cannot be."""
    from shoal.bundle import BundleError, python_executable, rerouted_environ

    root = os.path.abspath(root)
    import shoal

    here = (_same(sys.prefix, root) and os.environ.get("SHOAL_BUNDLE_ROOT") == root
            and os.path.realpath(shoal.__file__).startswith(os.path.realpath(root) + os.sep))
    if os.environ.get(_REEXEC) == root:  # we are the re-executed process
        del os.environ[_REEXEC]
        if here:
            return None
        return f"--bundle {root}: the re-executed interpreter runs from {sys.prefix}, not from the bundle"
    if here:  # already rerouted (e.g. `eval "$(shoal env --root ROOT)"` ran before)
        return None
    if not os.path.exists(root):
        return f"--bundle {root}: no such directory (run `shoal bcast BUNDLE... --to {root}` first)"
    if os.path.isfile(root):
        return f"--bundle {root}: a file, not an unpacked bundle root (give the `shoal bcast --to` directory)"
    try:
        py = python_executable(root)
        env = rerouted_environ(root)
    except BundleError as exc:
        return f"--bundle {exc}"
    if not list(Path(root).glob("lib/python3*/site-packages/shoal/__init__.py")):
        return (f"--bundle {root}: the bundle has no shoal package in lib/pythonX.Y/site-packages "
                "(deliver a tier-2 bundle built without --no-shoal)")
    env[_REEXEC] = root
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(py, [str(py), "-c", _BOOT, what, *argv], env)
    except OSError as exc:
        return f"--bundle {root}: cannot run {py}: {exc}"
    return None  # not reached


def _opt(flag: str, value: object) -> list[str]:
    return [] if value is None else [flag, str(value)]


def head_command(args: argparse.Namespace) -> int:
    if args.bundle:
        err = run_from_bundle("head", args.bundle, [
            "--connection-file", os.path.abspath(args.connection_file), *_opt("--bind", args.bind),
            *_opt("--host", args.host), "--prefetch", str(args.prefetch), "--bundle", args.bundle,
            *_opt("--heartbeat-timeout", args.heartbeat_timeout), "--crash-limit", str(args.crash_limit),
            *_opt("--journal", args.journal and os.path.abspath(args.journal)),
            *_opt("--trace", args.trace and os.path.abspath(args.trace)),
            "--expect-agents", str(args.expect_agents), "--expect-timeout", str(args.expect_timeout),
            *([] if args.encrypt is None else ["--encrypt" if args.encrypt else "--no-encrypt"])])
        if err:
            print(f"shoal head: {err}", file=sys.stderr)
            return 2
    import zmq

    from shoal.head.journal import JournalError
    from shoal.head.server import Head
    from shoal.trace.store import TraceError
    from shoal.transport.connfile import host_address, is_local_endpoint

    logging.basicConfig(level=logging.INFO, format="shoal head: %(message)s")
    log = logging.getLogger("shoal.head")
    bind = args.bind
    if bind is None:
        addr, how = host_address()
        bind = f"tcp://{addr}:0"
        if addr.startswith("127."):
            log.warning("listening on %s only, found by %s: agents on other hosts cannot reach "
                        "it; give --bind tcp://ADDRESS:0", addr, how)
    encrypt = not is_local_endpoint(bind) if args.encrypt is None else args.encrypt
    if encrypt and not zmq.has("curve"):
        if args.encrypt:
            print("shoal head: --encrypt: this libzmq has no CURVE support", file=sys.stderr)
            return 2
        log.warning("this libzmq has no CURVE support: traffic with the head is not encrypted")
        encrypt = False
    conn = Connection.new(bind, encrypt=encrypt)
    try:
        head = Head(conn, bind=bind, prefetch=args.prefetch,
                    heartbeat_timeout=args.heartbeat_timeout, crash_limit=args.crash_limit,
                    journal=args.journal, expect_agents=args.expect_agents,
                    expect_timeout=args.expect_timeout, trace=args.trace,
                    big_first=args.big_first, plan=args.plan)
    except zmq.ZMQError as exc:
        print(f"shoal head: cannot listen on {bind}: {exc}", file=sys.stderr)
        return 2
    except (ValueError, JournalError, TraceError) as exc:
        print(f"shoal head: {exc}", file=sys.stderr)
        return 2
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
    print(f"shoal head listening on {endpoint}{' (encrypted)' if encrypt else ''}; "
          f"connection file {os.path.abspath(args.connection_file)}", flush=True)

    stop_on_signals(head)
    head.serve()
    return 0


def agent_command(args: argparse.Namespace) -> int:
    from shoal.agent.__main__ import failure_kwargs, resource_kwargs

    try:
        limits.check_counts(args.slots, args.workers)
        caps = limits.from_args(args.max_output, args.max_result)
        extra = failure_kwargs(args, os.path.abspath(args.connect))
        extra.update(resource_kwargs(args))
    except ValueError as exc:
        print(f"shoal agent: {exc}", file=sys.stderr)
        return 2
    sys_path = [os.getcwd()]
    if args.bundle:
        err = run_from_bundle("agent", args.bundle, [
            "--connect", os.path.abspath(args.connect), *_opt("--slots", args.slots),
            *_opt("--workers", args.workers), *_opt("--name", args.name),
            *_opt("--max-output", args.max_output), *_opt("--max-result", args.max_result),
            "--bundle", args.bundle,
            *_opt("--walltime", args.walltime), "--drain-timeout", str(args.drain_timeout),
            "--reconnect", str(args.reconnect), "--kill-grace", str(args.kill_grace),
            *_opt("--gpus", args.gpus), *_opt("--memory", args.memory),
            "--mpi-launcher", args.mpi_launcher, *_opt("--idle-timeout", args.idle_timeout)])
        if err:
            print(f"shoal agent: {err}", file=sys.stderr)
            return 2
        app = os.path.join(os.path.abspath(args.bundle), "app")
        if os.path.isdir(app):  # the application's tier 3: local, unlike the current directory
            sys_path = [app]
    from shoal.agent.agent import Agent

    limits.configure(*caps)
    logging.basicConfig(level=logging.INFO, format="shoal agent: %(message)s")
    from shoal.transport.session import server_key

    try:
        conn = Connection.read(args.connect)
    except (OSError, ConnectionFileError) as exc:
        print(f"shoal agent: {exc}", file=sys.stderr)
        return 2
    try:
        agent = Agent(conn.address, conn.key, slots=args.slots, workers=args.workers,
                      name=args.name, sys_path=sys_path, server_key=server_key(conn),
                      **extra)  # type: ignore[arg-type]
    except ValueError as exc:
        print(f"shoal agent: {exc}", file=sys.stderr)
        return 2
    agent.run()  # SIGTERM drains, a second one (or SIGINT) stops at once
    return agent.exit_code
