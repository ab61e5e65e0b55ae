"""The program that runs inside a job's sandbox: compile the script strictly, run it.

``python -m shoal.service.sandbox_job --status-fd FD --workers N --name NAME SCRIPT -- ARGS``
compiles ``SCRIPT`` (named ``NAME`` in messages) in strict mode in the current directory (the
job's working tree) and runs it on a local shoal runtime, like ``shoal script --strict``. It
prints the commands' output in script order, ``progress: K/N commands finished`` lines on
stderr, and writes one JSON line to ``FD`` for the sandbox: ``{"refused": "job.sh:3: ..."}``
or ``{"exit": STATUS}``. With ``--bridge REQ,RESP`` (``shoal serve --connect``) the commands
run on a runtime's agents through the service (``shoal.service.proxy``) instead of a local
runtime.

With ``--state DIR`` the run can be resumed: the compiled plan is kept in ``DIR/plan`` before
any command runs, the chains run under the head's journal ``DIR/journal.db`` (key: the chain)
and keep their run directory ``.shoal-scratch-job`` (intermediates on disk, not in the
sandbox's memory file system, which dies with it). Started again after a kill, it runs that
same plan (a new compile could see the killed run's outputs in globs and tests and differ):
chains that finished are answered from the journal, a chain cut off midway skips its
commands that recorded a status, and output already printed is not printed again.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pickle
import signal
import sys
import threading

RUN_ID = "job"  # a resumable job's run directory: .shoal-scratch-job in its working tree


def _progress(total: int, stop: threading.Event) -> None:
    """Print how many commands have recorded a status, when it changes (at most every 1 s)."""
    last = -1
    while not stop.wait(1.0):
        done = sum(len(os.listdir(d)) for d in glob.glob(".shoal-scratch-*/st")
                   if os.path.isdir(d))
        if done != last:
            print(f"progress: {done}/{total} commands finished", file=sys.stderr, flush=True)
            last = done


def _keep_plan(plan: object, path: str) -> bool:
    """Write the plan for a resume (atomically); False (and a ``no-resume`` mark) if it
    cannot be pickled."""
    try:
        data = pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        print(f"warning: the job cannot be resumed after a service restart ({exc})",
              file=sys.stderr, flush=True)
        with open(os.path.join(os.path.dirname(path), "no-resume"), "w"):
            pass
        return False
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return True


def main(argv: list[str] | None = None) -> int:
    """Run one job; return its exit status (2: refused by the compiler)."""
    p = argparse.ArgumentParser(prog="shoal.service.sandbox_job")
    p.add_argument("--status-fd", type=int, required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--name", required=True)
    p.add_argument("--state", metavar="DIR", help="keep the plan and journal here (resumable)")
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

    plan_file = os.path.join(a.state, "plan") if a.state else None
    ended = os.path.join(a.state, "exit") if a.state else None
    if ended is not None and os.path.exists(ended):
        # the run ended before the kill, only the service did not learn it: its exit status
        with open(ended) as f:
            code = int(f.read().strip() or 1)
        print(f"progress: resumed: the job had ended (exit status {code})", file=sys.stderr,
              flush=True)
        report({"exit": code})
        return code
    resumed_plan = plan_file is not None and os.path.exists(plan_file)
    if a.state and os.path.exists(os.path.join(a.state, "no-resume")):
        msg = (f"{a.name}: the service restarted while this job ran, and its plan could not be "
               "kept to resume it: submit it again")
        print(f"shoal script: error: {msg}", file=sys.stderr, flush=True)
        report({"refused": msg})
        return 2
    try:
        if resumed_plan:
            with open(plan_file, "rb") as f:
                plan = pickle.load(f)  # written below by this program, before any command ran
            done = len(glob.glob(f".shoal-scratch-{RUN_ID}/st/*"))
            print(f"progress: resumed: {done} of {len(plan.steps)} commands had finished "
                  "(they are not run again)", file=sys.stderr, flush=True)
        else:
            with open(a.script, "rb") as f:
                source = f.read()
            plan = compile_source(source, a.name, a.args,
                                  CompileOptions(cwd=os.getcwd(), strict=True))
            if plan_file is not None and not _keep_plan(plan, plan_file):
                a.state = None  # runs, but a restart cannot resume it
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
    if not resumed_plan:
        print(f"progress: compiled {len(plan.steps)} commands into {len(plan.clusters)} "
              "clusters", file=sys.stderr, flush=True)

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
    if a.state:  # resumable: a fixed run directory, intermediates on disk
        opts.run_id, opts.shm_dir = RUN_ID, None
        if not a.bridge:  # the local runtime's head keeps the journal
            opts.journal = os.path.join(a.state, "journal.db")
    try:
        rep = run_plan(plan, os.getcwd(), opts)
    finally:
        stop.set()
    sys.stdout.flush()
    if a.state and not rep.interrupted:  # for a resume that finds the run had ended
        with open(os.path.join(a.state, "exit"), "w") as f:
            f.write(str(rep.exit_code))
    for line in failure_report(plan, rep, os.getcwd()):
        print(line, file=sys.stderr)
    n = len(plan.steps)
    resumed = f", {rep.from_journal} chains answered from the journal" if a.state else ""
    print(f"progress: done: {n - len(rep.failed) - len(rep.skipped)} of {n} commands "
          f"succeeded, {len(rep.failed)} failed, {len(rep.skipped)} not run{resumed} "
          f"({rep.wall:.2f} s)", file=sys.stderr, flush=True)
    report({"exit": rep.exit_code})
    return rep.exit_code


if __name__ == "__main__":
    sys.exit(main())
