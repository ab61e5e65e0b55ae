"""``shoal script``: compile a shell script into a DAG of commands and run it in parallel."""

from __future__ import annotations

import argparse
import os
import signal
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register the ``script`` sub-command."""
    p = subparsers.add_parser(
        "script",
        help="run a shell script of file-to-file tools as a parallel DAG",
        description="Compile an unmodified sh script (NCO, coreutils, ...) into a DAG of "
                    "commands linked by the files they read and write, and run it in parallel "
                    "with the same results as `bash SCRIPT ARGS`.",
    )
    p.add_argument("script", help="the shell script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments ($1, $2, ...)")
    p.add_argument("--dry-run", "-n", action="store_true",
                   help="print the commands with line numbers and dependencies; run nothing")
    p.add_argument("--dot", metavar="FILE", help="write the DAG in Graphviz dot format")
    p.add_argument("--strict", action="store_true",
                   help="reject unknown programs and writes outside the working tree")
    p.add_argument("--commands", metavar="TOML", action="append", default=[],
                   help="extra program file semantics (same format as the built-in table)")
    p.add_argument("-j", "--workers", type=int, default=None,
                   help="clusters run at once (default: one per core)")
    p.add_argument("--cluster", choices=("chains", "swamp", "none"), default="chains",
                   help="partitioning of the DAG into dispatch units (default: chains)")
    p.add_argument("--local-threads", action="store_true",
                   help="run with a local thread pool instead of the shoal runtime")
    p.add_argument("--connect", metavar="FILE", default=os.environ.get("SHOAL_CONNECT"),
                   help="run on the agents of a running `shoal head` (its connection file; "
                        "default $SHOAL_CONNECT), else on a local runtime")
    p.add_argument("--no-shm", action="store_true",
                   help="keep intermediate files on disk, not in /dev/shm")
    p.add_argument("--scratch", metavar="DIR", help="where disk scratch goes (default: here)")
    p.add_argument("--keep-run-dir", action="store_true",
                   help="keep per-command status and output files (for debugging)")
    p.add_argument("--timings", action="store_true", help="print compile and run times")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Compile (and unless --dry-run, run) ``args.script``; return the exit status."""
    from shoal.script.compiler import CompileOptions, compile_script
    from shoal.script.errors import ScriptError

    cwd = os.getcwd()
    opts = CompileOptions(cwd=cwd, strict=args.strict, commands=args.commands,
                          clustering=args.cluster)
    try:
        plan = compile_script(args.script, args.args, opts)
    except ScriptError as exc:
        print(f"shoal script: error: {exc}", file=sys.stderr)
        return 2
    warning = plan.unknown_warning()
    if warning:
        print(warning, file=sys.stderr)
    for w in plan.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.dot:
        from shoal.script.output import to_dot

        with open(args.dot, "w") as f:
            f.write(to_dot(plan))
    if args.dry_run:
        from shoal.script.output import dry_run

        sys.stdout.write(dry_run(plan, cwd))
        return 0
    from shoal.script.runner import RunOptions, failure_report, run_plan

    ropts = RunOptions(workers=args.workers,
                       backend="threads" if args.local_threads else "auto",
                       scratch_dir=args.scratch, shm_dir=None if args.no_shm else "/dev/shm",
                       keep_run_dir=args.keep_run_dir,
                       connect=None if args.local_threads else args.connect)
    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # same clean-up as Ctrl-C: stop commands, remove scratch

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        report = run_plan(plan, cwd, ropts)
    finally:
        signal.signal(signal.SIGTERM, previous)
    for line in failure_report(plan, report, cwd):
        print(line, file=sys.stderr)
    if args.timings:
        t = plan.timings
        print(f"shoal script: compiled {len(plan.steps)} commands in {t['total'] * 1000:.1f} ms "
              f"({len(plan.clusters)} clusters); ran in {report.wall:.2f} s on {report.backend}; "
              f"scratch: {report.scratch_shm} in memory, {report.scratch_disk} on disk"
              f"{'' if report.shm_scope == 'shared' else ' (memory per node: inside clusters)'}",
              file=sys.stderr)
        if report.preferred:
            kept = sum(report.agent_of.get(c) == a for c, a in report.preferred.items())
            print(f"shoal script: locality: {kept} of {len(report.preferred)} clusters with "
                  "inputs from other clusters ran on the agent that wrote them", file=sys.stderr)
    return report.exit_code
