"""``python -m shoal [-n WORKERS] [--journal FILE] prog.py ARGS``: run an unmodified program on shoal.

The program runs as ``__main__`` in this process; its ``shoal.futures`` calls go to a
runtime started here: the embedded local default, every node of the batch allocation it
runs in (docs/cluster.md; ``--hostfile``/``--hosts``/``--launcher``/``--interface``), or
``--connect FILE``. ``python -m
shoal run ...`` (or any other sub-command) is the ``shoal`` command line.

SCOOP's launcher options: ``-n``, ``--hostfile``, ``--hosts`` (also SCOOP's form, several
names: ``--hosts a a b prog.py``), ``--prolog``, ``--pythonpath``
and ``--path``/``-p`` work (see shoal.launch.workenv for what the prolog carries); its
others (``-b``, ``--tunnel``, ``--nice``, ``--backend``, ...) are accepted with a one-line
warning each (docs/scoop.md).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

# SCOOP's launcher options that mean nothing here: flag -> (takes a value, why)
SCOOP_IGNORED: dict[tuple[str, ...], tuple[bool, str]] = {
    ("-b",): (True, "there are no brokers: one head serves every agent"),
    ("--tunnel",): (False, "agents connect to the head directly (CURVE-encrypted over TCP)"),
    ("--rsh",): (False, "agents start with ssh, srun, mpirun or pbsdsh (--launcher)"),
    ("--ssh-executable",): (True, "agents start with ssh, srun, mpirun or pbsdsh (--launcher)"),
    ("--external-hostname",): (True, "give --interface NAME for the address agents reach"),
    ("--python-interpreter",): (True, "agents run this interpreter (sys.executable)"),
    ("--nice",): (True, "tasks run at this process's niceness"),
    ("--backend",): (True, "the transport is ZeroMQ"),
    ("--debug",): (False, "see --trace FILE for every task's attempts"),
    ("--profile",): (False, "see --trace FILE for every task's attempts"),
    ("-v", "--verbose"): (False, "the launcher prints only warnings and errors"),
    ("-q", "--quiet"): (False, "the launcher prints only warnings and errors"),
}


class _Ignored(argparse.Action):
    """Takes a SCOOP option shoal has no use for and warns once, in one line."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        seen = getattr(namespace, "scoop_ignored", None) or []
        if self.dest not in seen:
            seen.append(self.dest)
            print(f"shoal: ignoring SCOOP's {option_string}: {self.help}", file=sys.stderr)
        namespace.scoop_ignored = seen


def scoop_hosts(argv: list[str], takes_value: frozenset[str] = frozenset()) -> list[str]:
    """SCOOP's ``--hosts h1 h2 ... prog.py`` (and ``--host``): the names up to the next
    option or the program (the first existing file) become one ``--hosts`` value. A host
    named more than once gets one slot per mention, as in SCOOP (``--hosts a a b`` is
    ``a:2,b:1``); hosts named once keep shoal's meaning (their own core count).
    ``takes_value``: the options whose next word is their value (not the program)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--" or not arg.startswith("-") and os.path.isfile(arg):
            out += argv[i:]  # the program: the rest is its own
            break
        if arg not in ("--hosts", "--host"):
            out.append(arg)
            i += 1
            if arg in takes_value and i < len(argv):
                out.append(argv[i])
                i += 1
            continue
        names: list[str] = []
        i += 1
        while i < len(argv) and not argv[i].startswith("-") and not os.path.isfile(argv[i]):
            names.append(argv[i])
            i += 1
        if len(names) > 1 and all(":" not in n and "," not in n for n in names):
            counts: dict[str, int] = {}
            for n in names:
                counts[n] = counts.get(n, 0) + 1
            if any(c > 1 for c in counts.values()):
                names = [f"{n}:{c}" for n, c in counts.items()]
        out += ["--hosts", ",".join(names)] if names else ["--hosts"]
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from shoal.cli.main import COMMANDS

    if argv and argv[0] in COMMANDS:
        from shoal.cli.main import main as cli_main

        return cli_main(argv)
    ap = argparse.ArgumentParser(
        prog="python -m shoal",
        description="Run a Python program whose shoal.futures calls run in parallel.",
    )
    ap.add_argument("-n", "--workers", type=int, help="warm Python workers (default: one per core)")
    ap.add_argument("--connect", metavar="FILE", help="join a running head instead")
    ap.add_argument("--schedule", choices=("dynamic", "static"), default="dynamic")
    ap.add_argument("--prefetch", type=int, default=1)
    ap.add_argument("--retries", type=int, default=0, metavar="N",
                    help="run a failed task again up to N times (Executor(retries=N))")
    ap.add_argument("--timeout", type=float, metavar="SECONDS",
                    help="time limit of every task's attempt (Executor(task_timeout=...))")
    ap.add_argument("--journal", metavar="FILE",
                    help="record finished tasks in FILE (SQLite); running the same program again "
                         "takes their results from it instead of running them")
    ap.add_argument("--trace", metavar="FILE",
                    help="record every task's attempts (where, when, which cores) in FILE; "
                         "`shoal trace FILE` reports on it (docs/trace.md)")
    from shoal.launch.cluster import add_cluster_options

    add_cluster_options(ap)
    g = ap.add_argument_group("worker environment (SCOOP's options; docs/scoop.md)")
    g.add_argument("--prolog", metavar="SCRIPT",
                   help="shell script sourced at the start of every agent, on its node: its "
                        "workers and commands get the environment it exports")
    g.add_argument("--pythonpath", metavar="DIR", action="append",
                   help="put DIR (or DIR1:DIR2) first on the tasks' import path and PYTHONPATH "
                        "(repeatable; not the program's)")
    g.add_argument("-p", "--path", metavar="DIR",
                   help="the directory agents, workers and commands run in (default: this one)")
    g = ap.add_argument_group("SCOOP's other options: accepted, ignored with a one-line warning")
    for flags, (takes, why) in SCOOP_IGNORED.items():
        g.add_argument(*flags, action=_Ignored, nargs=1 if takes else 0, help=why,
                       dest=f"scoop_{flags[-1].lstrip('-').replace('-', '_')}",
                       **({"metavar": "X"} if takes else {}))
    ap.add_argument("program", help="the Python program to run")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    takes = frozenset(o for a in ap._actions if a.nargs != 0 for o in a.option_strings)
    args = ap.parse_args(scoop_hosts(argv, takes))
    if not os.path.isfile(args.program):
        print(f"shoal: program {args.program!r} not found", file=sys.stderr)
        return 2
    from shoal import futures
    from shoal.client.executor import Executor, ExecutorError
    from shoal.task import errors  # errors.HeadLost: made on first use (a failure)

    if args.workers is not None and args.workers < 1:
        print("shoal: -n must be at least 1", file=sys.stderr)
        return 2
    from shoal.launch.cluster import cluster_kwargs

    try:
        ex = Executor(args.workers, schedule=args.schedule, prefetch=args.prefetch,
                      connect=args.connect, retries=args.retries, task_timeout=args.timeout,
                      journal=args.journal, trace=args.trace, prolog=args.prolog,
                      pythonpath=args.pythonpath, workdir=args.path, **cluster_kwargs(args))
    except ValueError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return 2
    except ExecutorError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return 3
    futures.set_executor(ex)
    sys.argv = [args.program, *args.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.program)))
    code = 0
    try:
        runpy.run_path(args.program, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
        ex.shutdown(wait=False, cancel_futures=True)
    except ExecutorError as exc:
        if not isinstance(exc, errors.HeadLost) and exc is not ex._error:
            raise
        # the run is gone (head lost, every agent exited: a cancelled job), not the
        # program's bug: one line, as shoal run
        print(f"shoal: {str(exc).splitlines()[0]}", file=sys.stderr)
        code = 3
    finally:
        futures.set_executor(None)
        ex.shutdown(wait=code == 0, cancel_futures=code != 0)
        ex._terminate()
    return code


if __name__ == "__main__":
    sys.exit(main())
