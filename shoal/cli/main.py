"""`shoal` command line: one sub-command a module, imported only when used.

Each sub-command module exposes ``add_parser(subparsers)`` (which registers its
arguments and sets ``func``) so start-up stays cheap and modules stay independent.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# sub-command -> module (relative to shoal.cli) that implements it
COMMANDS: dict[str, str] = {
    "run": "run",          # one shell command per line of a task file
    "head": "cluster",     # start a head, write a connection file
    "agent": "cluster",    # join a head as a node agent
    "alloc": "alloc",      # submit pilot jobs (sbatch/qsub) that start agents for a head
    "script": "script",    # compile and run a shell script as a DAG
    "bundle": "bundle",    # build tiered environment bundles
    "bcast": "bundle",     # broadcast bundles to node-local storage
    "env": "bundle",       # print exports that reroute the interpreter
    "info": "info",        # show the allocation, this node, launchers, address
    "trace": "trace",      # report on a trace file (`shoal head --trace FILE`)
    "sim": "sim",          # simulate a workload on fake agents (shoal.sim)
    "report": "trace",     # the HTML report of a trace file
    "serve": "serve",      # HTTP service running submitted scripts in sandboxes
    "submit": "submit",    # client of `shoal serve`: send a script, fetch its results
    "status": "status",    # a running head's agents, queue and recent failures
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shoal", description="Many-task computing runtime for Python."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = COMMANDS.get(argv[0]) if argv else None
    loaded: set[str] = set()
    for module in COMMANDS.values():
        if wanted is not None and module != wanted:
            # neither loaded nor listed: only the top level's usage and help name the
            # others, and they are printed when no known command was given (each empty
            # parser cost ~0.4 ms of `shoal run`'s start)
            continue
        if module in loaded:
            continue
        try:
            mod = importlib.import_module(f"shoal.cli.{module}")
        except ModuleNotFoundError as exc:  # a part not installed in this build
            if exc.name != f"shoal.cli.{module}":
                raise
            continue
        mod.add_parser(sub)
        loaded.add(module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``shoal`` program: ``argv`` None means this process's arguments (and, for the
    commands of ``EXIT_AT_ONCE``, an exit as soon as the command returns)."""
    argv_given = argv
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        code = int(func(args) or 0)
    except ValueError as exc:  # a bad connection file (--connect) is one line, not a traceback
        from shoal.transport.connfile import ConnectionFileError

        if not isinstance(exc, ConnectionFileError):
            raise
        print(f"shoal {args.command}: {exc}", file=sys.stderr)
        return 2
    if argv_given is None and args.command in EXIT_AT_ONCE:
        _exit_now(code)
    return code


# Commands that leave nothing to clean up in this process when they return (their head and
# agent have exited): as the program, they exit at once instead of tearing the interpreter
# down (40-90 ms for what `shoal run` imported, inside the wall time users measure).
EXIT_AT_ONCE = frozenset({"run"})


def _exit_now(code: int) -> None:
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a pipe whose reader left
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
