"""Run a compiled plan: each cluster is one command task running a generated ``sh`` chain.

A worker runs a whole chain without a round trip per command. Inside the chain every command
checks the status of the commands it depends on (shell variables inside the cluster, status
files for other clusters) and is skipped when one failed, so a failing command skips its
dependents while independent branches finish. Each command's stdout and stderr go to files that
the runner prints in script order, so the output reads as bash's would.

Intermediate files live in a scratch directory: ``/dev/shm`` while the estimated live size fits
in a fraction of its free space, a directory on disk otherwise. A chain deletes a scratch file
right after its last user when all users are in that chain; otherwise the runner deletes it once
every cluster using it has finished. Ctrl-C stops everything and removes all scratch files.

Two back ends with the same semantics: the shoal runtime (``Executor``; clusters are submitted
with ``after=`` dependencies, so the head releases them without asking the client) and a local
thread pool (``--local-threads``), useful without a runtime.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from .cluster import Cluster
from .compiler import Plan

SKIPPED = "skip"


@dataclass
class RunOptions:
    """How to run a plan."""

    workers: int | None = None          # parallel clusters (default: cores)
    backend: str = "auto"               # "shoal", "threads", or "auto" (shoal if importable)
    scratch_dir: str | None = None      # disk scratch (default: WORKDIR/.shoal-scratch-RUNID)
    shm_dir: str | None = "/dev/shm"    # memory scratch; None: disk only
    shm_fraction: float = 0.5           # use at most this share of the free memory scratch
    keep_run_dir: bool = False
    stdout: IO[str] | None = None
    stderr: IO[str] | None = None


@dataclass
class RunReport:
    """What happened."""

    status: dict[int, str] = field(default_factory=dict)  # step -> exit status or "skip"
    failed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    exit_code: int = 0
    wall: float = 0.0
    scratch_shm: int = 0
    scratch_disk: int = 0
    interrupted: bool = False
    backend: str = ""


class _Layout:
    """Where a run keeps its files: status/out/err per step, chain scripts, scratch."""

    def __init__(self, plan: Plan, workdir: str, opts: RunOptions) -> None:
        self.run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        base = opts.scratch_dir or workdir
        self.root = os.path.join(base, f".shoal-scratch-{self.run_id}")
        self.disk = os.path.join(self.root, "files")
        for d in ("st", "out", "err", "chains", "files", "done", "started"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        self.shm: str | None = None
        self.place: dict[int, str] = {}  # scratch group -> directory
        groups = plan.dag.scratch_groups()
        budget = 0
        if opts.shm_dir and groups and os.path.isdir(opts.shm_dir):
            try:
                st = os.statvfs(opts.shm_dir)
                budget = int(st.f_bavail * st.f_frsize * opts.shm_fraction)
            except OSError:
                budget = 0
            if budget > 0:
                self.shm = os.path.join(opts.shm_dir, f"shoal-script-{self.run_id}")
                os.makedirs(self.shm, exist_ok=True)
        # greedy placement in script order: live intermediates in memory while they fit
        live: list[tuple[int, int]] = []  # (last user, size) of those in memory
        used = 0
        self.shm_count = self.disk_count = 0
        for g in sorted(groups, key=lambda g: min(plan.dag.scratch_users.get(g.id, {0}))):
            users = plan.dag.scratch_users.get(g.id, set())
            first, last = (min(users), max(users)) if users else (0, 0)
            still = []
            for end, size in live:
                if end < first:
                    used -= size
                else:
                    still.append((end, size))
            live = still
            if self.shm and used + g.est_size <= budget:
                self.place[g.id] = self.shm
                live.append((last, g.est_size))
                used += g.est_size
                self.shm_count += 1
            else:
                self.place[g.id] = self.disk
                self.disk_count += 1

    def scratch_path(self, plan: Plan, gid: int) -> str:
        return os.path.join(self.place[gid], plan.dag.groups[gid].scratch_name)

    def remove(self, keep_run_dir: bool = False) -> None:
        if self.shm:
            shutil.rmtree(self.shm, ignore_errors=True)
        if keep_run_dir:
            shutil.rmtree(self.disk, ignore_errors=True)
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def _chain_script(plan: Plan, cluster: Cluster, lay: _Layout, local_delete: dict[int, list[int]]
                  ) -> str:
    """The ``sh`` program that runs one cluster's steps in order."""
    dag = plan.dag
    inside = set(cluster.steps)
    r = shlex.quote(lay.root)
    out = ["#!/bin/sh", f"# cluster {cluster.id} of {plan.script}", f"R={r}",
           # mkdir is atomic: a chain dispatched twice (e.g. a retry after a lost agent) runs once
           f'mkdir "$R/started/{cluster.id}" 2>/dev/null || exit 0',
           '_ok() { [ "$(cat "$R/st/$1" 2>/dev/null)" = 0 ]; }']
    for v in cluster.steps:
        s = dag.steps[v]
        conds = []
        for p in sorted(dag.preds[v]):
            conds.append(f'[ "$s{p}" = 0 ]' if p in inside else f"_ok {p}")
        prefix_of = {u.loc: u.prefix for u in s.uses if u.loc is not None}
        subst: dict[tuple[int, str, int], str | None] = {}
        for loc, gid in dag.subst[v].items():
            subst[loc] = None if gid < 0 else prefix_of.get(loc, "") + lay.scratch_path(plan, gid)
        out.append(f"# step {v}, line {s.line}")
        if v in dag.noop:
            body = ":"
        else:
            cmd = s.render(subst)
            env = "".join(f"export {k}={shlex.quote(val)}; " for k, val in sorted(s.env.items()))
            body = (f"( cd {shlex.quote(s.cwd)} && {env}{cmd}\n) >\"$R/out/{v}\" "
                    f"2>\"$R/err/{v}\" </dev/null")
        if conds:
            out.append(f"if {' && '.join(conds)}; then {body}\ns{v}=$?\nelse s{v}={SKIPPED}; fi")
        else:
            out.append(f"{body}\ns{v}=$?")
        out.append(f'echo "$s{v}" >"$R/st/{v}"')
        for gid in local_delete.get(v, []):
            out.append(f"rm -f {shlex.quote(lay.scratch_path(plan, gid))}")
    out.append(f': >"$R/done/{cluster.id}"')
    out.append("exit 0")
    return "\n".join(out) + "\n"


class _Printer:
    """Prints each step's captured stdout/stderr, in script order, as steps finish."""

    def __init__(self, plan: Plan, lay: _Layout, opts: RunOptions) -> None:
        self.n = len(plan.dag.steps)
        self.next = 0
        self.lay = lay
        self.out = opts.stdout or sys.stdout
        self.err = opts.stderr or sys.stderr
        self.done: set[int] = set()

    def finished(self, steps: list[int]) -> None:
        self.done.update(steps)
        while self.next < self.n and self.next in self.done:
            for kind, stream in (("out", self.out), ("err", self.err)):
                path = os.path.join(self.lay.root, kind, str(self.next))
                try:
                    with open(path, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                except OSError:
                    continue
                if text:
                    stream.write(text)
                    stream.flush()
            self.next += 1


def _read_status(lay: _Layout, v: int) -> str:
    try:
        with open(os.path.join(lay.root, "st", str(v))) as f:
            return f.read().strip() or SKIPPED
    except OSError:
        return SKIPPED


def run_plan(plan: Plan, workdir: str, opts: RunOptions | None = None) -> RunReport:
    """Run ``plan`` (compiled in ``workdir``) and report; raises nothing for failed commands."""
    opts = opts or RunOptions()
    t0 = time.perf_counter()
    dag = plan.dag
    lay = _Layout(plan, os.path.abspath(workdir), opts)
    report = RunReport(scratch_shm=lay.shm_count, scratch_disk=lay.disk_count)
    cluster_of = {v: c.id for c in plan.clusters for v in c.steps}
    # scratch files used by one cluster only are deleted by that chain after their last user
    local_delete: dict[int, list[int]] = {}
    client_delete: dict[int, set[int]] = {}  # group -> clusters that must finish first
    for gid, users in dag.scratch_users.items():
        cl = {cluster_of[u] for u in users}
        if len(cl) == 1:
            order = plan.clusters[next(iter(cl))].steps
            last = max(users, key=order.index)
            local_delete.setdefault(last, []).append(gid)
        else:
            client_delete[gid] = cl
    scripts = []
    for c in plan.clusters:
        path = os.path.join(lay.root, "chains", f"c{c.id}.sh")
        with open(path, "w") as f:
            f.write(_chain_script(plan, c, lay, local_delete))
        scripts.append(path)
    printer = _Printer(plan, lay, opts)
    pending_delete = {gid: set(cl) for gid, cl in client_delete.items()}

    def cluster_done(cid: int) -> None:
        printer.finished(plan.clusters[cid].steps)
        for gid in list(pending_delete):
            pending_delete[gid].discard(cid)
            if not pending_delete[gid]:
                del pending_delete[gid]
                try:
                    os.unlink(lay.scratch_path(plan, gid))
                except OSError:
                    pass

    backend = opts.backend
    if backend == "auto":
        try:
            import shoal  # noqa: F401
            from shoal import Executor  # noqa: F401
            backend = "shoal"
        except ImportError:
            backend = "threads"
    report.backend = backend
    try:
        if backend == "shoal":
            _run_shoal(plan, scripts, workdir, opts, cluster_done, lay.root)
        else:
            _run_threads(plan, scripts, workdir, opts, cluster_done)
    except KeyboardInterrupt:
        report.interrupted = True
    finally:
        for v in range(len(dag.steps)):
            report.status[v] = _read_status(lay, v)
        if not report.interrupted:
            printer.finished(list(range(len(dag.steps))))
        lay.remove(keep_run_dir=opts.keep_run_dir and not report.interrupted)
    for v, st in report.status.items():
        if st == SKIPPED:
            report.skipped.append(v)
        elif st != "0":
            report.failed.append(v)
    if report.interrupted:
        report.exit_code = 130
    elif report.failed:
        first = dag.steps[report.failed[0]]
        code = int(report.status[first.id]) if report.status[first.id].isdigit() else 1
        report.exit_code = code if 0 < code < 256 else 1
    elif report.skipped:
        report.exit_code = 1
    else:
        report.exit_code = plan.exit_status or 0
    report.wall = time.perf_counter() - t0
    return report


def _run_shoal(plan: Plan, scripts: list[str], workdir: str, opts: RunOptions,
               cluster_done: Callable[[int], None], root: str) -> None:
    from shoal import Command, Executor

    ex = Executor(workers=opts.workers)
    fut_of: dict[int, cf.Future] = {}
    cid_of: dict[cf.Future, int] = {}
    # Everything is submitted at once; the head releases each cluster when the clusters it
    # depends on have finished (`after`).
    try:
        for c in plan.clusters:  # clusters are created in topological order
            cmd = Command(["/bin/sh", scripts[c.id]], cwd=workdir, stdout="devnull",
                          stderr="capture")
            after = [fut_of[d] for d in sorted(c.deps)]
            fut = ex.options(after=after).submit(cmd) if after else ex.submit(cmd)
            fut_of[c.id] = fut
            cid_of[fut] = c.id
        for fut in cf.as_completed(list(cid_of)):
            cluster_done(cid_of[fut])
            if not fut.cancelled() and fut.exception() is None:
                err = fut.result().stderr  # the chain's own errors (its commands' go to files)
                if err:
                    sys.stderr.write(err.decode(errors="replace"))
    except KeyboardInterrupt:
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown()


def _run_threads(plan: Plan, scripts: list[str], workdir: str, opts: RunOptions,
                 cluster_done: Callable[[int], None]) -> None:
    workers = opts.workers or os.cpu_count() or 1
    procs: dict[int, subprocess.Popen[bytes]] = {}
    lock = threading.Lock()
    stopping = threading.Event()

    def run(cid: int) -> int:
        if stopping.is_set():
            return cid
        p = subprocess.Popen(["/bin/sh", scripts[cid]], cwd=workdir, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        with lock:
            procs[cid] = p
        p.wait()
        with lock:
            procs.pop(cid, None)
        return cid

    remaining = [len(c.deps) for c in plan.clusters]
    dependents: list[list[int]] = [[] for _ in plan.clusters]
    for c in plan.clusters:
        for d in c.deps:
            dependents[d].append(c.id)
    pool = cf.ThreadPoolExecutor(max_workers=workers)
    running: set[cf.Future[int]] = set()
    try:
        for c in plan.clusters:
            if not c.deps:
                running.add(pool.submit(run, c.id))
        while running:
            done, running = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for f in done:
                cid = f.result()
                cluster_done(cid)
                for s in dependents[cid]:
                    remaining[s] -= 1
                    if remaining[s] == 0:
                        running.add(pool.submit(run, s))
    except KeyboardInterrupt:
        stopping.set()
        with lock:
            for p in procs.values():
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def failure_report(plan: Plan, report: RunReport, workdir: str) -> list[str]:
    """Lines naming each failing script line, and how many commands were skipped."""
    lines = []
    for v in report.failed:
        s = plan.dag.steps[v]
        lines.append(f"{plan.script}:{s.line}: command failed with exit status "
                     f"{report.status[v]}: {s.describe()}")
    if report.skipped:
        lines.append(f"{plan.script}: {len(report.skipped)} command(s) skipped because a "
                     "command they depend on failed")
    if report.interrupted:
        lines.append(f"{plan.script}: interrupted; scratch files removed")
    return lines
