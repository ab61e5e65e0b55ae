"""`shoal alloc`: submit pilot jobs that start agents for a running head when work is queued.

    shoal head --connection-file run.json &
    shoal alloc --connect run.json --max-jobs 4 --nodes-per-job 2 --walltime 1:00:00 &
    python -m shoal --connect run.json prog.py

HyperQueue's automatic allocation is the model. Every ``--interval`` seconds it reads the
head's counters (as a client) and the state of the jobs it submitted (by job id), then
submits one job when the queued tasks exceed the slots present plus the slots of its jobs
not yet joined, with at most ``--max-jobs`` jobs queued or running and at most
``--backlog`` waiting in the batch queue. A failed submission, or a job that ended before
any of its agents joined, backs off (doubling, capped); ``--max-failures`` in a row stop it
with one line naming the batch system's error or the job's output file. Agents leave after
``--idle-timeout`` idle seconds and their job ends with them; a queued job no longer needed
is cancelled. On SIGINT/SIGTERM, or when the head is gone, it cancels its jobs still queued.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from shoal.launch import providers as P


def add_parser(sub: Any) -> None:
    a = sub.add_parser("alloc", help="submit pilot jobs (sbatch/qsub) that start agents for a "
                                     "head while work is queued")
    a.add_argument("--connect", default="shoal-connection.json", metavar="FILE",
                   help="the head's connection file (on a file system the nodes share)")
    a.add_argument("--batch", choices=sorted(P.PROVIDERS), default=None,
                   help="batch system (default: slurm when sbatch is on PATH, else pbs)")
    a.add_argument("--max-jobs", type=int, default=1, metavar="N",
                   help="jobs queued or running at once, at most (default 1)")
    a.add_argument("--backlog", type=int, default=1, metavar="N",
                   help="jobs waiting in the batch queue at once, at most (default 1)")
    a.add_argument("--nodes-per-job", type=int, default=None, metavar="N",
                   help="nodes each job asks for (default 1)")
    a.add_argument("--max-nodes-per-job", type=int, default=None, metavar="K",
                   help="instead of --nodes-per-job: size each job to the queued work, "
                        "1 to K nodes")
    a.add_argument("--cpus-per-node", type=int, default=None, metavar="C",
                   help="CPUs asked for on each node (agents offer them as slots; default: "
                        "what the batch system gives)")
    a.add_argument("--gpus-per-node", type=int, default=None, metavar="G",
                   help="GPUs asked for on each node")
    a.add_argument("--walltime", default="1:00:00", metavar="TIME",
                   help="each job's time limit (seconds, H:M:S or D-H:M:S; default 1:00:00); "
                        "agents drain before it")
    a.add_argument("--partition", "--queue", dest="partition", default=None,
                   help="Slurm partition / PBS queue")
    a.add_argument("--account", default=None, help="account (project) charged")
    a.add_argument("--directive", action="append", default=[], metavar="LINE",
                   help="an extra directive line, e.g. '#SBATCH --constraint=x' (or "
                        "--directive=--constraint=x); repeatable")
    a.add_argument("--template", metavar="FILE",
                   help="job script template to use instead of the shipped one (see "
                        "--print-script; it must keep the {{agent}} placeholder)")
    a.add_argument("--print-script", action="store_true",
                   help="print the job script that would be submitted, and exit")
    a.add_argument("--idle-timeout", type=float, default=60.0, metavar="S",
                   help="agents leave after S seconds without work, and their job ends "
                        "(default 60; 0: they stay until the walltime)")
    a.add_argument("--join-timeout", type=float, default=300.0, metavar="S",
                   help="a started job none of whose agents joined within S seconds is "
                        "cancelled and counts as a failure (default 300)")
    a.add_argument("--max-failures", type=int, default=3, metavar="K",
                   help="stop after K failed submissions or jobs in a row (default 3)")
    a.add_argument("--retry-delay", type=float, default=5.0, metavar="S",
                   help="back-off after a failure: S seconds, doubling, at most 300 (default 5)")
    a.add_argument("--interval", type=float, default=2.0, metavar="S",
                   help="seconds between looks at the head and the batch queue (default 2)")
    a.add_argument("--workdir", metavar="DIR",
                   help="where job scripts and job output go (default: shoal-alloc/ beside "
                        "the connection file)")
    a.add_argument("--job-name", default="shoal-agents", help="batch job name")
    a.add_argument("--shoal-command", metavar="CMD",
                   help="how a node starts shoal (default: this interpreter, "
                        f"'{sys.executable} -m shoal.cli.main')")
    a.set_defaults(func=alloc_command)


def _fail(msg: str) -> int:
    print(f"shoal alloc: {msg}", file=sys.stderr, flush=True)
    return 2


def _say(msg: str) -> None:
    print(f"shoal alloc: {msg}", file=sys.stderr, flush=True)


# ---- the policy (pure: counts in, a decision out) ------------------------------------------
@dataclass
class Job:
    """A job this process submitted."""

    id: str
    nodes: int
    output: str
    state: str = P.PENDING
    native: str = ""
    reason: str = ""
    failed: bool = False
    agents: dict[str, int] = field(default_factory=dict)  # agent name -> slots, ever joined
    cancelled: bool = False
    started: float | None = None          # monotonic time it was first seen running
    completed_before: int = 0             # the head's count of finished tasks at submission

    @property
    def ended(self) -> bool:
        return self.state == P.ENDED


@dataclass
class Policy:
    """When to submit a job and how many nodes it asks for."""

    max_jobs: int = 1
    backlog: int = 1
    nodes_per_job: int = 1
    max_nodes_per_job: int | None = None  # size jobs to the work, 1..K nodes
    slots_per_node: int | None = None     # known (--cpus-per-node) or learnt from agents

    def expected(self, jobs: list[Job]) -> int:
        """Slots still to come from jobs queued or started whose agents have not all joined."""
        per = self.slots_per_node or 1
        return sum(max(0, j.nodes * per - sum(j.agents.values())) for j in jobs if not j.ended)

    def nodes_wanted(self, queued: int, slots_present: int, jobs: list[Job]) -> int:
        """Nodes for one more job now; 0: no job."""
        active = [j for j in jobs if not j.ended]
        if len(active) >= self.max_jobs:
            return 0
        if sum(1 for j in active if j.state == P.PENDING) >= self.backlog:
            return 0
        deficit = queued - slots_present - self.expected(jobs)
        if deficit <= 0:
            return 0
        if self.max_nodes_per_job is None:
            return self.nodes_per_job
        return max(1, min(self.max_nodes_per_job, math.ceil(deficit / (self.slots_per_node or 1))))


@dataclass
class Backoff:
    """Failures in a row: a delay that doubles up to ``cap``, and a limit."""

    delay: float
    limit: int
    cap: float = 300.0
    count: int = 0
    until: float = 0.0

    def failed(self, now: float) -> float:
        self.count += 1
        wait = min(self.cap, self.delay * 2 ** (self.count - 1))
        self.until = now + wait
        return wait

    def ok(self) -> None:
        self.count = 0
        self.until = 0.0

    @property
    def exhausted(self) -> bool:
        return self.count >= self.limit


def _output(job: Job) -> str:
    """Where the job's output is, and its last line."""
    tail = _tail(job.output)
    return f"output {job.output}" + (f": {tail!r}" if tail else " (missing or empty)")


# The batch system's own notice that a job was cancelled (Slurm's slurmstepd writes one into
# the output when we cancel a job that never joined): it would hide the job's last own line.
_CANCEL_NOTICE = re.compile(r"\*\*\* (JOB|STEP) [\w.]+ ON \S+ CANCELLED AT ")


def _tail(path: str, limit: int = 200) -> str:
    """The last non-empty line of a job's output file ('' when there is none), skipping the
    batch system's cancel notice."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln and not _CANCEL_NOTICE.search(ln)]
    return lines[-1][-limit:] if lines else ""


# ---- the loop ------------------------------------------------------------------------------
class Allocator:
    """Runs the policy against a head and a batch system until stopped."""

    def __init__(self, provider: P.Provider, opts: P.JobOptions, policy: Policy,
                 backoff: Backoff, workdir: str, template: str | None, template_where: str,
                 interval: float, idle_cancel: float, join_timeout: float = 300.0) -> None:
        self.provider, self.opts, self.policy, self.backoff = provider, opts, policy, backoff
        self.workdir, self.template, self.template_where = workdir, template, template_where
        self.interval, self.idle_cancel, self.join_timeout = interval, idle_cancel, join_timeout
        self.address = "the head's address"
        self.jobs: dict[str, Job] = {}
        self.seq = 0
        self.submitted = 0
        self.stop = threading.Event()
        self.stop_reason = ""
        self.last_work = time.monotonic()
        self.completed = 0  # the head's count of finished tasks, last seen
        self.status_error = ""

    # -- one submission
    def submit(self, nodes: int) -> Job | None:
        self.seq += 1
        name = self.provider.output_name(self.seq)
        opts = P.JobOptions(**{**self.opts.__dict__, "nodes": nodes,
                               "output": os.path.join(self.workdir, name)})
        script = self.provider.script(opts, self.template, self.template_where)
        path = os.path.join(self.workdir, f"job-{self.seq}.sh")
        with open(path, "w") as f:
            f.write(script)
        self.submitted += 1
        try:
            job_id = self.provider.submit(path)
        except P.ProviderError as exc:
            self.failure(str(exc))
            return None
        # (counted from submission: a short task may finish before an agent is seen joining)
        job = Job(job_id, nodes, opts.output.replace("%j", job_id), completed_before=self.completed)
        self.jobs[job_id] = job
        _say(f"submitted job {job_id} ({nodes} node{'s' * (nodes > 1)}; script {path})")
        return job

    def failure(self, what: str) -> None:
        wait = self.backoff.failed(time.monotonic())
        if self.backoff.exhausted:
            self.stop_reason = (f"giving up after {self.backoff.count} failures in a row; "
                                f"last: {what}")
            self.stop.set()
        else:
            _say(f"{what}; next submission in {wait:g} s "
                 f"(failure {self.backoff.count} of {self.backoff.limit} in a row)")

    # -- what the head and the batch system say
    def observe(self, stats: dict[str, Any], agents: list[Any]) -> None:
        live = [j for j in self.jobs.values() if not j.ended]
        status: dict[str, P.JobStatus] = {}
        if live:
            try:
                status = self.provider.status(j.id for j in live)
                self.status_error = ""
            except P.ProviderError as exc:
                if str(exc) != self.status_error:  # once, not every look
                    _say(f"{exc} (asking again every {self.interval:g} s)")
                self.status_error = str(exc)
        now = time.monotonic()
        for job in live:
            st = status.get(job.id)
            if st is not None and st.state == P.RUNNING and job.started is None:
                job.started = now
                _say(f"job {job.id} started")
        # agents before endings: a job whose agents joined and left is not a failure
        for a in agents:
            name = str(a.name)
            if not name.startswith("alloc-"):
                continue
            for job in self.jobs.values():
                if name.startswith(f"alloc-{job.id}-") and name not in job.agents:
                    job.agents[name] = int(a.slots)
                    _say(f"job {job.id}: agent {name} joined ({a.slots} slots)")
                    if self.opts.cpus_per_node is None:
                        self.policy.slots_per_node = max(self.policy.slots_per_node or 0,
                                                         int(a.slots))
        completed = int(stats.get("completed", 0))
        if completed > self.completed and any(j.agents for j in live):
            self.backoff.ok()  # jobs' agents join and tasks finish: the job script works
        self.completed = completed
        for job in live:
            st = status.get(job.id)
            if st is None:
                continue
            job.state, job.native, job.reason, job.failed = st.state, st.native, st.reason, st.failed
            if job.ended:
                self.ended(job, stats)
            elif (job.started is not None and not job.agents and not job.cancelled
                  and now - job.started > self.join_timeout):
                # agents that cannot reach the head (wrong address, firewall) may hang, not exit
                err = self.provider.cancel([job.id])
                job.cancelled = True
                self.failure(f"job {job.id} ran {self.join_timeout:g} s and no agent joined the "
                             f"head (can the nodes reach {self.address}?); cancelled it"
                             + (f" ({err})" if err else "") + f"; {_output(job)}")

    def ended(self, job: Job, stats: dict[str, Any]) -> None:
        queued = int(stats.get("queued", 0))
        if job.agents and queued and job.completed_before == int(stats.get("completed", 0)):
            # its agents came and went and nothing finished: the queued tasks may need more
            # than such a job gives; submitting the same job again would loop
            self.failure(f"job {job.id} ended ({job.native}); its agents left without a task "
                         f"finished while {queued} were queued (do the tasks need more than a "
                         "job gives: cores, GPUs, memory, time?)")
        elif job.agents:
            _say(f"job {job.id} ended ({job.native}); {len(job.agents)} agent(s) had joined")
        elif job.cancelled:
            _say(f"job {job.id} ended (cancelled before it started)")
        elif job.native == "CANCELLED":  # by someone else (scancel): not the script's fault
            _say(f"job {job.id} was cancelled outside shoal alloc before any agent joined")
        else:
            why = job.native + (f", {job.reason}" if job.reason else "")
            self.failure(f"job {job.id} ended ({why}) before any agent joined; {_output(job)}")

    def cancel_queued(self, why: str) -> None:
        """Cancel the jobs still waiting in the batch queue, and say so."""
        waiting = [j for j in self.jobs.values() if j.state == P.PENDING and not j.cancelled]
        if waiting:
            try:  # one fresh look: a job that started meanwhile is left to its agents
                status = self.provider.status(j.id for j in waiting)
                waiting = [j for j in waiting if status[j.id].state == P.PENDING]
            except P.ProviderError:
                pass
        if waiting:
            err = self.provider.cancel(j.id for j in waiting)
            for j in waiting:
                j.cancelled = True
            ids = " ".join(j.id for j in waiting)
            _say(f"{why}: cancelled {len(waiting)} queued job(s): {ids}"
                 + (f" ({err})" if err else ""))
        running = [j.id for j in self.jobs.values() if j.state == P.RUNNING and not j.cancelled]
        if running and self.stop.is_set():
            idle = (f"idle timeout {self.opts.idle_timeout:g} s, or the walltime"
                    if self.opts.idle_timeout > 0 else "no idle timeout: the walltime")
            _say(f"job(s) {' '.join(running)} keep running until their agents leave ({idle})")

    def tick(self, stats: dict[str, Any], agents: list[Any]) -> None:
        self.observe(stats, agents)
        if self.stop.is_set():
            return
        now = time.monotonic()
        queued = int(stats.get("queued", 0))
        if queued > 0:
            self.last_work = now
        elif self.idle_cancel > 0 and now - self.last_work > self.idle_cancel:
            if any(j.state == P.PENDING and not j.cancelled for j in self.jobs.values()):
                self.cancel_queued(f"no queued work for {self.idle_cancel:g} s")
        if now < self.backoff.until:
            return
        nodes = self.policy.nodes_wanted(queued, int(stats.get("slots", 0)),
                                         list(self.jobs.values()))
        if nodes:
            self.submit(nodes)

    def run(self, connect: str) -> int:
        from shoal.client.executor import Executor
        from shoal.task.errors import ExecutorError

        try:
            ex = Executor(connect=connect)
        except ExecutorError as exc:
            return _fail(f"cannot reach the head of {connect}: {exc}")
        from shoal.transport.connfile import Connection

        self.address = Connection.read(connect).address
        _say(f"watching the head of {connect} with {self.provider.name}; job scripts and "
             f"output in {self.workdir}")
        code = 0
        try:
            while not self.stop.is_set():
                try:
                    stats = ex.stats(timeout=30)
                    agents = ex.agents(timeout=30)
                except ExecutorError as exc:
                    self.stop_reason = f"the head is gone ({exc}); no more jobs"
                    break
                self.tick(stats, agents)
                self.stop.wait(self.interval)
        finally:
            gave_up = self.stop_reason.startswith("giving up")
            if self.stop_reason and not gave_up:
                _say(self.stop_reason)
            self.cancel_queued("stopping")
            if gave_up:  # the last line says why it stopped
                code = 1
                _say(self.stop_reason)
            try:
                ex.shutdown(wait=False)
            except Exception:  # noqa: BLE001 - the head may be gone; nothing to release
                pass
        return code


def alloc_command(args: argparse.Namespace) -> int:
    from shoal.agent.failures import parse_walltime

    for flag, value, least in (("--max-jobs", args.max_jobs, 1), ("--backlog", args.backlog, 1),
                               ("--nodes-per-job", args.nodes_per_job, 1),
                               ("--max-nodes-per-job", args.max_nodes_per_job, 1),
                               ("--cpus-per-node", args.cpus_per_node, 1),
                               ("--gpus-per-node", args.gpus_per_node, 1),
                               ("--max-failures", args.max_failures, 1)):
        if value is not None and value < least:
            return _fail(f"{flag} {value}: must be {least} or more")
    for flag, fvalue in (("--idle-timeout", args.idle_timeout), ("--retry-delay", args.retry_delay),
                         ("--interval", args.interval), ("--join-timeout", args.join_timeout)):
        if not fvalue >= 0:
            return _fail(f"{flag} {fvalue:g}: must be 0 or more seconds")
    if 0 < args.idle_timeout <= args.interval:  # an agent could come and go unseen
        return _fail(f"--interval {args.interval:g} must be shorter than --idle-timeout "
                     f"{args.idle_timeout:g}")
    if args.nodes_per_job is not None and args.max_nodes_per_job is not None:
        return _fail("give --nodes-per-job or --max-nodes-per-job, not both")
    try:
        walltime = parse_walltime(args.walltime)
    except ValueError as exc:
        return _fail(str(exc))
    batch = args.batch or P.detect()
    if batch is None:
        return _fail("no batch system found (neither sbatch nor qsub on PATH); give --batch")
    provider = P.get(batch)
    template, where = None, ""
    if args.template:
        try:
            with open(args.template) as f:
                template = f.read()
        except OSError as exc:
            return _fail(f"--template {args.template}: {exc.strerror}")
        where = args.template
    connect = os.path.abspath(args.connect)
    workdir = os.path.abspath(args.workdir or os.path.join(os.path.dirname(connect), "shoal-alloc"))
    shoal = shlex.split(args.shoal_command) if args.shoal_command else None
    opts = P.JobOptions(
        connect=connect, nodes=args.nodes_per_job or args.max_nodes_per_job or 1,
        walltime=walltime, cpus_per_node=args.cpus_per_node, gpus_per_node=args.gpus_per_node,
        partition=args.partition, account=args.account, directives=list(args.directive),
        idle_timeout=args.idle_timeout, job_name=args.job_name,
        output=os.path.join(workdir, provider.output_name(1)),
        **({"shoal": shoal} if shoal else {}))
    try:
        script = provider.script(opts, template, where)
    except P.TemplateError as exc:
        return _fail(str(exc))
    if args.print_script:
        sys.stdout.write(script)
        return 0
    if not os.path.exists(connect):
        return _fail(f"--connect {args.connect}: no such file (start `shoal head "
                     f"--connection-file {args.connect}` first)")
    os.makedirs(workdir, exist_ok=True)
    policy = Policy(max_jobs=args.max_jobs, backlog=args.backlog,
                    nodes_per_job=args.nodes_per_job or 1,
                    max_nodes_per_job=args.max_nodes_per_job, slots_per_node=args.cpus_per_node)
    alloc = Allocator(provider, opts, policy, Backoff(args.retry_delay, args.max_failures),
                      workdir, template, where, args.interval,
                      idle_cancel=args.idle_timeout or 60.0, join_timeout=args.join_timeout)

    def stop(signum: int, _frame: object) -> None:
        alloc.stop_reason = f"stopped by {signal.Signals(signum).name}"
        alloc.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return alloc.run(connect)
