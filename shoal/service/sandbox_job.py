"""The program that runs inside a job's sandbox: compile the script strictly, run it.

``python -m shoal.service.sandbox_job --status-fd FD --workers N --name NAME SCRIPT -- ARGS``
compiles ``SCRIPT`` (named ``NAME`` in messages) in strict mode in the current directory (the
job's working tree) and runs it on a local shoal runtime, like ``shoal script --strict``. It
prints the commands' output in script order, ``progress: K/N commands finished`` lines on
stderr, and writes one JSON line to ``FD`` for the sandbox: ``{"refused": "job.sh:3: ..."}``
or ``{"exit": STATUS}``. With ``--bridge REQ,RESP`` (``shoal serve --connect``) the commands
run on a runtime's agents through the service (``shoal.service.proxy``) instead of a local
runtime.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys
import threading


def _progress(total: int, stop: threading.Event) -> None:
    """Print how many commands have recorded a status, when it changes (at most every 1 s)."""
    last = -1
    while not stop.wait(1.0):
        done = sum(len(os.listdir(d)) for d in glob.glob(".shoal-scratch-*/st")
                   if os.path.isdir(d))
        if done != last:
            print(f"progress: {done}/{total} commands finished", file=sys.stderr, flush=True)
            last = done


def main(argv: list[str] | None = None) -> int:
    """Run one job; return its exit status (2: refused by the compiler)."""
    p = argparse.ArgumentParser(prog="shoal.service.sandbox_job")
    p.add_argument("--status-fd", type=int, required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--name", required=True)
    p.add_argument("--bridge", metavar="REQ,RESP",
                   help="run the commands through the service (shoal serve --connect): the "
                        "descriptors of the request and answer pipes (shoal.service.proxy)")
    p.add_argument("script")
    p.add_argument("args", nargs="*")
    a = p.parse_args(argv)
    os.set_inheritable(a.status_fd, False)  # none of the job's processes gets it
    if a.bridge:  # nor the pipes to the service (the compiler may run filters)
        for fd in a.bridge.split(","):
            os.set_inheritable(int(fd), False)
    status = os.fdopen(a.status_fd, "w")

    def report(obj: dict) -> None:
        status.write(json.dumps(obj) + "\n")
        status.flush()

    from shoal.script.compiler import CompileOptions, compile_source
    from shoal.script.errors import ScriptError

    try:
        with open(a.script, "rb") as f:
            source = f.read()
        plan = compile_source(source, a.name, a.args,
                              CompileOptions(cwd=os.getcwd(), strict=True))
    except ScriptError as exc:
        print(f"shoal script: error: {exc}", file=sys.stderr, flush=True)
        report({"refused": str(exc)})
        return 2
    except RecursionError:
        msg = f"{a.name}: the script nests too deeply to compile"
        print(f"shoal script: error: {msg}", file=sys.stderr, flush=True)
        report({"refused": msg})
        return 2
    for w in plan.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"progress: compiled {len(plan.steps)} commands into {len(plan.clusters)} clusters",
          file=sys.stderr, flush=True)

    from shoal.script.runner import RunOptions, failure_report, run_plan

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    stop = threading.Event()
    t = threading.Thread(target=_progress, args=(len(plan.steps), stop), daemon=True)
    t.start()
    opts = RunOptions(workers=a.workers, backend="shoal")
    if a.bridge:
        from shoal.service.proxy import ProxyExecutor

        req, resp = (int(x) for x in a.bridge.split(","))
        # each command has its own /dev/shm on its node: only intermediates inside one
        # cluster may live in memory
        opts.executor, opts.shm_scope = ProxyExecutor(req, resp), "cluster"
    try:
        rep = run_plan(plan, os.getcwd(), opts)
    finally:
        stop.set()
    sys.stdout.flush()
    for line in failure_report(plan, rep, os.getcwd()):
        print(line, file=sys.stderr)
    n = len(plan.steps)
    print(f"progress: done: {n - len(rep.failed) - len(rep.skipped)} of {n} commands "
          f"succeeded, {len(rep.failed)} failed, {len(rep.skipped)} not run "
          f"({rep.wall:.2f} s)", file=sys.stderr, flush=True)
    report({"exit": rep.exit_code})
    return rep.exit_code


if __name__ == "__main__":
    sys.exit(main())
