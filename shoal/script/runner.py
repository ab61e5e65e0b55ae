"""Run a compiled plan: each cluster is one command task running a generated bash chain.

A worker runs a whole chain without a round trip per command, under the script's bash, each
command with the shell options in force at its line. Failures are bash's: without `set -e`
every command runs (a `&&` skips what follows a failure); under `set -e` the script stops at
the first failing command in script order and later commands leave no trace (``staging.py``:
staged writes, in-order commands, the frontier below). Each command's stdout and stderr go to
files that the runner prints in script order, so the output reads as bash's would.

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
from .model import DEL, INOUT, OUT, option_prologue
from .staging import materialize, unpin

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
    # resumable run (``shoal serve``): a fixed run id names the run directory, so a rerun of
    # the same plan after a kill finds it; the head's journal (this file) answers the chains
    # that finished, and a chain cut off midway skips the steps that recorded a status.
    # Intermediates must outlive the kill: give shm_dir=None (disk scratch in the run dir).
    run_id: str | None = None
    journal: str | None = None
    # an Executor-like object to run on instead of starting one (shoal serve --connect's
    # runner, shoal.service.proxy); run_plan shuts it down
    executor: Any = None


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
    stopped_at: int | None = None   # the step where `set -e` ended the script
    backend: str = ""
    shm_scope: str = "shared"
    agent_of: dict[int, str | None] = field(default_factory=dict)  # cluster -> agent it ran on
    preferred: dict[int, str] = field(default_factory=dict)   # cluster -> agent it preferred
    from_journal: int = 0   # resumed run: chains the head answered from the journal


class _Layout:
    """Where a run keeps its files: status/out/err per step, chain scripts, scratch."""

    def __init__(self, plan: Plan, workdir: str, opts: RunOptions,
                 node_local: dict[int, int] | None = None) -> None:
        """``node_local``: memory scratch is per node; only the groups it lists (scratch group
        -> the one cluster using it) may go there, into a directory of that cluster."""
        self.run_id = opts.run_id or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.resumable = opts.run_id is not None
        base = opts.scratch_dir or workdir
        self.root = os.path.join(base, f".shoal-scratch-{self.run_id}")
        self.disk = os.path.join(self.root, "files")
        for d in ("st", "out", "err", "chains", "files", "done", "started"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        if self.resumable:  # a chain cut off by a kill must start again (it skips done steps)
            done = set(os.listdir(os.path.join(self.root, "done")))
            for c in os.listdir(os.path.join(self.root, "started")):
                if c not in done:
                    os.rmdir(os.path.join(self.root, "started", c))
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
            if plan.staging.on:  # under set -e it lives until what ends it is known to run
                last = max(last, plan.staging.ends.get(g.id, len(plan.dag.steps)))
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
    """The bash program that runs one cluster's steps in order.

    Each step records its status: a number, ``skip`` (a `&&` before it failed: bash does not
    run it) or ``dead`` (`set -e`: the script stopped before it). Without `set -e` a failure
    stops nothing else, as in bash; the DAG's other edges only order.
    """
    dag = plan.dag
    stg = plan.staging
    inside = set(cluster.steps)
    r = shlex.quote(lay.root)
    out = [f"#!{plan.shell}", f"# cluster {cluster.id} of {plan.script}", f"R={r}",
           # mkdir is atomic: a chain dispatched twice (e.g. a retry after a lost agent) runs once
           f'mkdir "$R/started/{cluster.id}" 2>/dev/null || exit 0',
           # status of a step of another cluster, without a fork
           '_st() { _v=; read -r _v <"$R/st/$1" 2>/dev/null || :; }',
           '_live() { case $1 in 0|skip) return 0;; esac; return 1; }']
    mine = lay.cluster_shm.get(cluster.id)
    if mine is not None:
        # node-local memory scratch: this chain's own directory on the node it runs on,
        # removed when the chain ends (also when it is stopped)
        out += [f"M={shlex.quote(mine)}", 'mkdir -p "$M" || exit 1',
                "trap 'rm -rf \"$M\"' EXIT", "trap 'exit 143' HUP INT TERM"]
    # the options commands run with: once for the chain when its steps agree
    prologues = {v: option_prologue(dag.steps[v].options, dag.steps[v].shopt)
                 for v in cluster.steps}
    shared = len(set(prologues.values())) == 1
    if shared and prologues[cluster.steps[0]]:
        out.append(prologues[cluster.steps[0]].rstrip("; "))
    for v in cluster.steps:
        s = dag.steps[v]
        dead: list[str] = []   # a predecessor ended the script (set -e)
        skip: list[str] = []   # a `&&` before this step failed
        for p in sorted(dag.preds[v]):
            val = f'"$s{p}"' if p in inside else '"$_v"'
            get = "" if p in inside else f"_st {p}; "
            if p in s.after:
                skip.append(f"{{ {get}[ {val} = 0 ]; }}")
            elif stg.on:
                test = f"_live {val}" if dag.steps[p].errexit else f"[ {val} != dead ]"
                dead.append(f"{{ {get}{test}; }}")
        prefix_of = {u.loc: u.prefix for u in s.uses if u.loc is not None}
        subst: dict[tuple[int, str, int], str | None] = {}
        for loc, gid in dag.subst[v].items():
            subst[loc] = None if gid < 0 else prefix_of.get(loc, "") + lay.scratch_path(plan, gid)
        if stg.on:
            for loc, gid in stg.subst[v].items():
                subst[loc] = prefix_of.get(loc, "") + lay.scratch_path(plan, gid)
        out.append(f"# step {v}, line {s.line}")
        if v in dag.noop:
            body = ":"
        else:
            cmd = s.render(subst)
            env = "".join(f"unset {k}; " if val is None else f"export {k}={shlex.quote(val)}; "
                          for k, val in sorted(s.env.items()))
            opts = "" if shared else prologues[v]
            if "x" in s.options:  # the trace of the command only (bash traces to stderr)
                opts += "set -x; "
            body = (f"( cd {shlex.quote(s.cwd)} && {env}{opts}{cmd}\n) >\"$R/out/{v}\" "
                    f"2>\"$R/err/{v}\" </dev/null")
        branches = []
        if stg.on:
            branches.append('[ -e "$R/dead" ]')
        if dead:
            branches.append("! { " + " && ".join(dead) + "; }")
        lines = [f"{'if' if k == 0 else 'elif'} {c}; then s{v}=dead"
                 for k, c in enumerate(branches)]
        if skip:
            lines.append(f"{'elif' if lines else 'if'} ! {{ {' && '.join(skip)}; }}; "
                         f"then s{v}={SKIPPED}")
        if lay.resumable:  # a status recorded before a kill: the step ran, do not rerun it
            out.append(f'if [ -s "$R/st/{v}" ]; then read -r s{v} <"$R/st/{v}"; else')
        if lines:
            out += lines + [f"else {body}", f"s{v}=$?", "fi"]
        else:
            out.append(f"{body}\ns{v}=$?")
        out.append(f'echo "$s{v}" >"$R/st/{v}"')
        if lay.resumable:
            out.append("fi")
        for gid in local_delete.get(v, []):
            out.append(f"rm -f {shlex.quote(lay.scratch_path(plan, gid))}")
    out.append(f': >"$R/done/{cluster.id}"')
    out.append("exit 0")
    return "\n".join(out) + "\n"


class _Frontier:
    """Follows the steps in script order as their statuses arrive: prints each step's output
    (so it reads as bash's would), finds where `set -e` stops the script, defers the deletion
    of intermediates that the place where the script stops may still need, and says when an
    in-order step may start."""

    def __init__(self, plan: Plan, lay: _Layout, opts: RunOptions) -> None:
        self.plan = plan
        self.n = len(plan.dag.steps)
        self.next = 0                  # every step before it has finished, in script order
        self.stopped: int | None = None  # the step where set -e ended the script
        self.lay = lay
        self.out = opts.stdout or sys.stdout
        self.err = opts.stderr or sys.stderr
        self.done: set[int] = set()    # steps whose cluster has finished
        self.status: dict[int, str] = {}
        # resumable: the steps whose output a run before a kill printed already
        self.printed = 0
        self.printed_file = os.path.join(lay.root, "printed") if lay.resumable else None
        if self.printed_file is not None:
            try:
                with open(self.printed_file) as f:
                    self.printed = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pass

    def advance(self, finished: list[int] | None = None) -> None:
        if finished:
            self.done.update(finished)
        if self.stopped is not None:
            return
        errexit = self.plan.staging.on
        while self.next < self.n:
            v = self.next
            st = self._status(v)
            if st is None:
                return
            self.status[v] = st
            self._print(v)
            self.next += 1
            if errexit and st not in ("0", SKIPPED, "dead") and self.plan.dag.steps[v].errexit:
                self.stopped = v
                try:
                    with open(os.path.join(self.lay.root, "dead"), "w"):
                        pass
                except OSError:
                    pass
                return

    def _status(self, v: int) -> str | None:
        """The status of ``v``, or None while it may still run."""
        try:
            with open(os.path.join(self.lay.root, "st", str(v))) as f:
                text = f.read().strip()
        except OSError:
            text = ""
        if text:
            return text
        return SKIPPED if v in self.done else None  # empty: not written yet

    def _print(self, v: int) -> None:
        if v < self.printed:
            return
        self._print_files(v)
        if self.printed_file is not None:
            with open(self.printed_file, "w") as f:
                f.write(str(v + 1))

    def _print_files(self, v: int) -> None:
        for kind, stream in (("out", self.out), ("err", self.err)):
            path = os.path.join(self.lay.root, kind, str(v))
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            if text:
                stream.write(text)
                stream.flush()


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
    if not plan.clusters:
        backend = "threads"  # nothing to run: no runtime to start
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

        ex = opts.executor or Executor(workers=opts.workers, connect=opts.connect,
                                       journal=opts.journal)
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
    stg = plan.staging
    # scratch files used by one cluster only are deleted by that chain after their last user
    # (under set -e by the runner: only once the command that ends them is known to run)
    local_delete: dict[int, list[int]] = {}
    client_delete: dict[int, set[int]] = {}  # group -> clusters that must finish first
    single: dict[int, int] = {}  # group -> the only cluster using it
    # intermediates ended by a command that may not run (`a && rm tmp`): kept until it did
    cond_end = {gid for gid in dag.scratch_users
                if (e := stg.ends.get(gid)) is not None and dag.steps[e].after}
    for gid, users in dag.scratch_users.items():
        cl = {cluster_of[u] for u in users}
        if len(cl) == 1:
            single[gid] = next(iter(cl))
        if len(cl) == 1 and not stg.on and gid not in cond_end:
            order = plan.clusters[next(iter(cl))].steps
            last = max(users, key=order.index)
            local_delete.setdefault(last, []).append(gid)
        else:
            client_delete[gid] = cl
    # per-node memory directories go when their chain ends: under set -e an intermediate may
    # outlive its chain (the place where the script stops needs it), so those go to disk
    if scope == "cluster":
        for gid in cond_end:
            single.pop(gid, None)
    lay = _Layout(plan, os.path.abspath(workdir), opts,
                  node_local=({} if stg.on else single) if scope == "cluster" else None)
    for gid in stg.staged:  # staged final files: on disk, next to the real ones
        lay.place[gid] = lay.disk
    report = RunReport(scratch_shm=lay.shm_count, scratch_disk=lay.disk_count, shm_scope=scope)
    scripts = []
    for c in plan.clusters:
        path = os.path.join(lay.root, "chains", f"c{c.id}.sh")
        with open(path, "w") as f:
            f.write(_chain_script(plan, c, lay, local_delete))
        scripts.append(path)
    front = _Frontier(plan, lay, opts)
    physical = {gid: lay.scratch_path(plan, gid) for gid in lay.place}
    pending_delete = {gid: set(cl) for gid, cl in client_delete.items()}
    # in-order steps start clusters that the runner releases when the frontier reaches them
    gated = {cid: c.steps[0] for cid, c in enumerate(plan.clusters) if c.steps[0] in stg.in_order}

    def progress(cid: int | None) -> list[int]:
        """A cluster finished (or a periodic look): advance; return clusters now released."""
        if cid is not None:
            front.advance(plan.clusters[cid].steps)
            for gid in pending_delete:
                pending_delete[gid].discard(cid)
        else:
            front.advance()
        for gid in [g for g, cl in pending_delete.items() if not cl]:
            if stg.on or gid in cond_end:
                end = stg.ends.get(gid, front.n)
                if front.stopped is not None or end >= front.next \
                        or front.status.get(end) in (SKIPPED, "dead"):
                    continue  # the place where the script stops (or its end) may need it
            del pending_delete[gid]
            try:
                os.unlink(lay.scratch_path(plan, gid))
            except OSError:
                pass
        if front.stopped is not None:
            return []
        opened = [c for c, first in gated.items() if first <= front.next]
        for c in opened:
            first = gated.pop(c)
            if dag.steps[first].barrier:  # an unknown program sees the files by name
                for msg in unpin(dag, stg, first, physical):
                    print(f"shoal script: {msg}", file=opts.stderr or sys.stderr)
        return opened

    report.backend = backend
    try:
        if ex is not None:
            prefer = _main_producers(plan, cluster_of) if opts.locality and len(agents) > 1 \
                else {}
            _run_shoal(ex, plan, scripts, workdir, prefer, progress, set(gated), report,
                       lay.run_id if lay.resumable and opts.journal else None)
        else:
            _run_threads(plan, scripts, workdir, opts, progress, set(gated))
    except KeyboardInterrupt:
        report.interrupted = True
    finally:
        if not report.interrupted:
            front.advance(list(range(len(dag.steps))))
            if stg.on or cond_end:
                last = front.stopped if front.stopped is not None else len(dag.steps) - 1
                ran = {v for v, st in front.status.items() if st not in (SKIPPED, "dead")}
                for msg in materialize(dag, stg, last, physical, ran):
                    print(f"shoal script: {msg}", file=opts.stderr or sys.stderr)
        for v in range(len(dag.steps)):
            report.status[v] = front.status.get(v) or _read_status(lay, v)
        lay.remove(keep_run_dir=opts.keep_run_dir and not report.interrupted)
        if report.interrupted and lay.cluster_shm and opts.connect and ex is not None:
            # chains stopped with SIGKILL on other nodes could not remove their memory
            # directories: remove them there with one pinned command per agent
            _sweep_agents(opts.connect, f"{lay.shm}-c")
    report.stopped_at = front.stopped
    for v, st in report.status.items():
        if st in (SKIPPED, "dead"):
            report.skipped.append(v)
        elif st != "0":
            report.failed.append(v)
    report.exit_code = _exit_code(plan, report)
    report.wall = time.perf_counter() - t0
    return report


def _exit_code(plan: Plan, report: RunReport) -> int:
    """What bash returns: 130 after Ctrl-C; the failing command's status where `set -e`
    stopped the script; else `exit N`, or the last statement's status: known at compile time,
    or that of the last command that ran."""
    if report.interrupted:
        return 130
    if report.stopped_at is not None:
        return _code(report.status[report.stopped_at])
    if plan.exit_status is not None:
        return plan.exit_status
    if plan.last_status is not None:
        return plan.last_status
    for v in range(len(plan.steps) - 1, -1, -1):
        if report.status.get(v, SKIPPED) not in (SKIPPED, "dead"):
            return _code(report.status[v])
    return 0


def _code(status: str) -> int:
    code = int(status) if status.isdigit() else 1
    return code if 0 <= code < 256 else 1


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
               progress: Callable[[int | None], list[int]], gated: set[int],
               report: RunReport, run_id: str | None = None) -> None:
    """Run the chains as command tasks on ``ex``.

    A cluster without an entry in ``prefer`` is submitted at once (with ``after=`` the clusters
    it waits for, so the head releases it). One with an entry waits until that producer
    cluster has finished and then goes to the producer's agent (``options(prefer=)``). One in
    ``gated`` waits until ``progress`` releases it (`set -e`: every earlier step succeeded).
    With ``run_id`` (a resumable run with a journal) each chain's journal key is
    ``RUN_ID:cCLUSTER``: the same in a killed run and in its resume (which runs the same
    plan), so the head answers the chains that finished before the kill from its journal.
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
    held = set(gated)

    def ready(cid: int) -> bool:
        return unsubmitted[cid] == 0 and producer_done[cid] and cid not in held \
            and cid not in fut_of

    def submit(first: int) -> None:
        stack = [first]
        while stack:
            cid = stack.pop()
            c = plan.clusters[cid]
            cmd = Command([plan.shell, scripts[cid]], cwd=workdir, stdout="devnull",
                          stderr="capture")
            after = [fut_of[d] for d in sorted(c.deps)]
            where = None
            if cid in prefer:
                where = fut_of[prefer[cid]].agent  # type: ignore[attr-defined]
                if where is not None:
                    report.preferred[cid] = where
            if run_id is not None:
                fut = ex.options(after=after, prefer=where, key=f"{run_id}:c{cid}").submit(cmd)
            elif after or where is not None:
                fut = ex.options(after=after, prefer=where).submit(cmd)
            else:
                fut = ex.submit(cmd)
            fut_of[cid] = fut
            fut.add_done_callback(lambda _f, cid=cid: done_q.put(cid))
            for e in reversed(dependents[cid]):
                unsubmitted[e] -= 1
                if ready(e):
                    stack.append(e)

    def release(opened: list[int]) -> None:
        for e in opened:
            held.discard(e)
            if ready(e):
                submit(e)

    try:
        for c in plan.clusters:  # clusters are created in topological order
            if ready(c.id):
                submit(c.id)
        release(progress(None))
        finished = 0
        while finished < len(fut_of):
            try:
                cid = done_q.get(timeout=0.5)
            except queue.Empty:
                if held:  # a step in the middle of a chain may have moved the frontier
                    release(progress(None))
                continue
            finished += 1
            fut = fut_of[cid]
            report.agent_of[cid] = fut.agent  # type: ignore[attr-defined]
            opened = progress(cid)
            if not fut.cancelled() and fut.exception() is None:
                err = fut.result().stderr  # the chain's own errors (its commands' go to files)
                if err:
                    sys.stderr.write(err.decode(errors="replace"))
            for e in waiting_for.pop(cid, ()):
                producer_done[e] = True
                if ready(e):
                    submit(e)
            release(opened)
        if run_id is not None:
            report.from_journal = int(ex.stats().get("from_journal", 0))
    except KeyboardInterrupt:
        ex.shutdown(wait=False, cancel_futures=True)  # the queued chains, in one request
        for f in fut_of.values():  # and the running ones: Ctrl-C stops them, the exit
            if not f.done():       # must not wait for them (as it waits for pending work)
                f.cancel(running=True)
        raise
    ex.shutdown()


def _run_threads(plan: Plan, scripts: list[str], workdir: str, opts: RunOptions,
                 progress: Callable[[int | None], list[int]], gated: set[int]) -> None:
    workers = opts.workers or os.cpu_count() or 1
    procs: dict[int, subprocess.Popen[bytes]] = {}
    lock = threading.Lock()
    stopping = threading.Event()

    def run(cid: int) -> int:
        if stopping.is_set():
            return cid
        p = subprocess.Popen([plan.shell, scripts[cid]], cwd=workdir, stdin=subprocess.DEVNULL,
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
    held = set(gated)
    pool = cf.ThreadPoolExecutor(max_workers=workers)
    running: set[cf.Future[int]] = set()

    def release(opened: list[int]) -> None:
        for e in opened:
            held.discard(e)
            if remaining[e] == 0:
                running.add(pool.submit(run, e))

    try:
        for c in plan.clusters:
            if not c.deps and c.id not in held:
                running.add(pool.submit(run, c.id))
        release(progress(None))
        while running:
            done, running = cf.wait(running, timeout=0.5 if held else None,
                                    return_when=cf.FIRST_COMPLETED)
            if not done:
                release(progress(None))
                continue
            for f in done:
                cid = f.result()
                opened = progress(cid)
                for s in dependents[cid]:
                    remaining[s] -= 1
                    if remaining[s] == 0 and s not in held:
                        running.add(pool.submit(run, s))
                release(opened)
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
    """Lines naming each failing script line, and where `set -e` stopped the script."""
    lines = []
    for v in report.failed:
        if report.stopped_at is not None and v > report.stopped_at:
            continue  # bash would not have run it
        s = plan.dag.steps[v]
        stop = " (set -e: the script stops here)" if v == report.stopped_at else ""
        lines.append(f"{plan.script}:{s.line}: command failed with exit status "
                     f"{report.status[v]}{stop}: {s.describe()}")
        if report.stopped_at is None:
            # a glob or test on a later line was decided as if this command had succeeded
            for u in s.uses:
                seen = plan.observed.get(u.path)
                # (a redirection's file is made by the shell, whatever the program does)
                if seen is not None and seen > s.line and u.role in (OUT, INOUT, DEL) and (
                        u.loc is None or u.loc[1] != "r"):
                    lines.append(
                        f"{plan.script}:{seen}: warning: compiled as if line {s.line} had "
                        f"made or removed '{os.path.relpath(u.path, workdir)}' (a glob or "
                        "test saw it): what follows may differ from bash; run it with bash")
                    break
    if report.stopped_at is not None:
        later = len(plan.steps) - report.stopped_at - 1
        if later:
            lines.append(f"{plan.script}: {later} later command(s) left no trace, as under "
                         "bash")
    if report.interrupted:
        lines.append(f"{plan.script}: interrupted; scratch files removed")
    return lines
