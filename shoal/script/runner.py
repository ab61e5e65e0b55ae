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

Locality: with several agents, a cluster that reads files written by other clusters is
submitted once the cluster that wrote most of its input bytes has finished, with
``prefer=`` that cluster's agent (``future.agent``): it runs there when that agent has room.
When the agents are not all on this host, ``/dev/shm`` is not one directory any more: then
only intermediates that stay inside one cluster go to memory (in a directory the chain makes
and removes on its node); files passed between clusters go to disk scratch.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

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
    connect: str | None = None          # connection file of a running head (else a local one)
    # memory scratch seen by: "shared" (one /dev/shm for the client and every agent),
    # "cluster" (per node: only intermediates inside one cluster), "auto" (from agents' hosts)
    shm_scope: str = "auto"
    locality: bool = True               # prefer the agent that wrote a cluster's inputs


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
    shm_scope: str = "shared"
    agent_of: dict[int, str | None] = field(default_factory=dict)  # cluster -> agent it ran on
    preferred: dict[int, str] = field(default_factory=dict)   # cluster -> agent it preferred


class _Layout:
    """Where a run keeps its files: status/out/err per step, chain scripts, scratch."""

    def __init__(self, plan: Plan, workdir: str, opts: RunOptions,
                 node_local: dict[int, int] | None = None) -> None:
        """``node_local``: memory scratch is per node; only the groups it lists (scratch group
        -> the one cluster using it) may go there, into a directory of that cluster."""
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
                if node_local is None:
                    os.makedirs(self.shm, exist_ok=True)
        self.node_local = node_local
        self.cluster_shm: dict[int, str] = {}  # cluster -> its own memory directory
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
            if self.shm and node_local is not None and g.id not in node_local:
                self.place[g.id] = self.disk  # crosses clusters, maybe nodes: disk
                self.disk_count += 1
            elif self.shm and used + g.est_size <= budget:
                if node_local is None:
                    self.place[g.id] = self.shm
                else:
                    cid = node_local[g.id]
                    self.place[g.id] = self.cluster_shm.setdefault(cid, f"{self.shm}-c{cid}")
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
        for d in self.cluster_shm.values():  # those of chains that ran (or were killed) here
            shutil.rmtree(d, ignore_errors=True)
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
    mine = lay.cluster_shm.get(cluster.id)
    if mine is not None:
        # node-local memory scratch: this chain's own directory on the node it runs on,
        # removed when the chain ends (also when it is stopped)
        out += [f"M={shlex.quote(mine)}", 'mkdir -p "$M" || exit 1',
                "trap 'rm -rf \"$M\"' EXIT", "trap 'exit 143' HUP INT TERM"]
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
    backend = opts.backend
    if backend == "auto":
        try:
            import shoal  # noqa: F401
            from shoal import Executor  # noqa: F401
            backend = "shoal"
        except ImportError:
            backend = "threads"
    ex = None
    if backend == "shoal":
        from shoal import Executor

        ex = Executor(workers=opts.workers, connect=opts.connect)
    try:
        return _run_plan(plan, workdir, opts, t0, backend, ex)
    finally:
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=True)  # no-op after a normal end


def _run_plan(plan: Plan, workdir: str, opts: RunOptions, t0: float, backend: str,
              ex: Any) -> RunReport:
    dag = plan.dag
    agents: list[Any] = []
    scope = opts.shm_scope
    if ex is not None:
        agents = ex.agents()
        if scope == "auto":
            here = socket.gethostname()
            shared = all(a.host == here for a in agents) and (opts.connect is None or agents)
            scope = "shared" if shared else "cluster"
    if scope not in ("shared", "cluster"):
        scope = "shared"
    cluster_of = {v: c.id for c in plan.clusters for v in c.steps}
    # scratch files used by one cluster only are deleted by that chain after their last user
    local_delete: dict[int, list[int]] = {}
    client_delete: dict[int, set[int]] = {}  # group -> clusters that must finish first
    single: dict[int, int] = {}  # group -> the only cluster using it
    for gid, users in dag.scratch_users.items():
        cl = {cluster_of[u] for u in users}
        if len(cl) == 1:
            order = plan.clusters[next(iter(cl))].steps
            last = max(users, key=order.index)
            local_delete.setdefault(last, []).append(gid)
            single[gid] = next(iter(cl))
        else:
            client_delete[gid] = cl
    lay = _Layout(plan, os.path.abspath(workdir), opts,
                  node_local=single if scope == "cluster" else None)
    report = RunReport(scratch_shm=lay.shm_count, scratch_disk=lay.disk_count, shm_scope=scope)
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

    report.backend = backend
    try:
        if ex is not None:
            prefer = _main_producers(plan, cluster_of) if opts.locality and len(agents) > 1 \
                else {}
            _run_shoal(ex, plan, scripts, workdir, prefer, cluster_done, report)
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
        if report.interrupted and lay.cluster_shm and opts.connect and ex is not None:
            # chains stopped with SIGKILL on other nodes could not remove their memory
            # directories: remove them there with one pinned command per agent
            _sweep_agents(opts.connect, f"{lay.shm}-c")
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


def _sweep_agents(connect: str, prefix: str, timeout: float = 10.0) -> None:
    """Run ``rm -rf PREFIX*`` on every agent of the head at ``connect`` (best effort)."""
    from shoal import Command, Executor

    try:
        with Executor(connect=connect) as ex:
            cmd = Command(f"rm -rf {shlex.quote(prefix)}*", stdout="devnull", stderr="devnull")
            futs = [ex.options(agent=a.name).submit(cmd) for a in ex.agents()]
            cf.wait(futs, timeout=timeout)
            ex.shutdown(wait=False, cancel_futures=True)
    except Exception as exc:  # the head may be gone: nothing more to do
        print(f"shoal script: could not remove memory scratch on the agents' nodes: {exc}",
              file=sys.stderr)


def _main_producers(plan: Plan, cluster_of: dict[int, int]) -> dict[int, int]:
    """For each cluster that reads files written by other clusters: the cluster that wrote
    most of those bytes (estimated sizes; on a tie, the writer of the input read first)."""
    dag = plan.dag
    pos = {v: k for c in plan.clusters for k, v in enumerate(c.steps)}
    weight: dict[int, dict[int, list[int]]] = {}  # reader cluster -> writer -> [bytes, -first]
    for ver in dag.versions:
        if ver.writer is None:
            continue
        cw = cluster_of[ver.writer]
        size = dag.groups[ver.group].est_size
        for r in ver.readers:
            cr = cluster_of[r]
            if cr == cw:
                continue
            w = weight.setdefault(cr, {}).get(cw)
            if w is None:
                weight[cr][cw] = [size, -pos[r]]
            else:
                w[0] += size
                w[1] = max(w[1], -pos[r])
    return {cr: max(ws, key=lambda cw: (ws[cw][0], ws[cw][1], -cw)) for cr, ws in weight.items()}


def _run_shoal(ex: Any, plan: Plan, scripts: list[str], workdir: str, prefer: dict[int, int],
               cluster_done: Callable[[int], None], report: RunReport) -> None:
    """Run the chains as command tasks on ``ex``.

    A cluster without an entry in ``prefer`` is submitted at once (with ``after=`` the clusters
    it waits for, so the head releases it). One with an entry waits until that producer
    cluster has finished and then goes to the producer's agent (``options(prefer=)``).
    """
    from shoal import Command

    n = len(plan.clusters)
    fut_of: dict[int, cf.Future] = {}  # type: ignore[type-arg]
    done_q: queue.SimpleQueue[int] = queue.SimpleQueue()
    dependents: list[list[int]] = [[] for _ in range(n)]
    for c in plan.clusters:
        for d in c.deps:
            dependents[d].append(c.id)
    waiting_for: dict[int, list[int]] = {}  # producer -> clusters submitted when it is done
    for cid, p in prefer.items():
        waiting_for.setdefault(p, []).append(cid)
    unsubmitted = [len(c.deps) for c in plan.clusters]  # deps without a future yet
    producer_done = [cid not in prefer for cid in range(n)]

    def submit(first: int) -> None:
        stack = [first]
        while stack:
            cid = stack.pop()
            c = plan.clusters[cid]
            cmd = Command(["/bin/sh", scripts[cid]], cwd=workdir, stdout="devnull",
                          stderr="capture")
            after = [fut_of[d] for d in sorted(c.deps)]
            where = None
            if cid in prefer:
                where = fut_of[prefer[cid]].agent  # type: ignore[attr-defined]
                if where is not None:
                    report.preferred[cid] = where
            if after or where is not None:
                fut = ex.options(after=after, prefer=where).submit(cmd)
            else:
                fut = ex.submit(cmd)
            fut_of[cid] = fut
            fut.add_done_callback(lambda _f, cid=cid: done_q.put(cid))
            for e in reversed(dependents[cid]):
                unsubmitted[e] -= 1
                if unsubmitted[e] == 0 and producer_done[e]:
                    stack.append(e)

    try:
        for c in plan.clusters:  # clusters are created in topological order
            if unsubmitted[c.id] == 0 and producer_done[c.id] and c.id not in fut_of:
                submit(c.id)
        finished = 0
        while finished < n:
            try:
                cid = done_q.get(timeout=0.5)
            except queue.Empty:
                continue
            finished += 1
            fut = fut_of[cid]
            report.agent_of[cid] = fut.agent  # type: ignore[attr-defined]
            cluster_done(cid)
            if not fut.cancelled() and fut.exception() is None:
                err = fut.result().stderr  # the chain's own errors (its commands' go to files)
                if err:
                    sys.stderr.write(err.decode(errors="replace"))
            for e in waiting_for.pop(cid, ()):
                producer_done[e] = True
                if unsubmitted[e] == 0:
                    submit(e)
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
