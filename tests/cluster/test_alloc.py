"""`shoal alloc` on the real local Slurm: a head on loopback TCP, `shoal alloc` as a real
process submitting real `sbatch` jobs whose agents join the head, a client with queued work.

Every job of a test carries that test's own job name, so the checks (and the clean-up) see
only its jobs, not those of other users of the same Slurm.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from shoal import Command, Executor

PY = sys.executable


def agent_has_idle_timeout(env: dict[str, str]) -> bool:
    r = subprocess.run([PY, "-m", "shoal.cli.main", "agent", "--help"], env=env,
                       capture_output=True, text=True, timeout=60)
    return "--idle-timeout" in r.stdout


class Alloc:
    """One `shoal alloc` process and the Slurm jobs it submits (found by their job name)."""

    def __init__(self, slurm, tmp_path, connfile, *flags: str) -> None:
        self.slurm = slurm
        self.name = f"shoal-test-{uuid.uuid4().hex[:8]}"
        self.workdir = tmp_path / "alloc"
        self.proc = subprocess.Popen(
            [PY, "-m", "shoal.cli.main", "alloc", "--connect", str(connfile), "--batch", "slurm",
             "--job-name", self.name, "--workdir", str(self.workdir), "--interval", "0.3",
             *flags],
            cwd=tmp_path, env=slurm.env, stderr=subprocess.PIPE, text=True)
        self.err = ""

    def jobs(self, states: str = "PENDING,RUNNING,CONFIGURING,COMPLETING") -> list[str]:
        r = self.slurm.run("squeue", "-h", "-n", self.name, "-t", states, "-o", "%i")
        return r.stdout.split()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        try:
            _, self.err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, self.err = self.proc.communicate()
            raise AssertionError(f"shoal alloc still running after {timeout} s")
        return self.proc.returncode

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.slurm.run("scancel", "-n", self.name)
        deadline = time.monotonic() + 30
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.2)

    def submitted(self) -> list[str]:
        return re.findall(r"submitted job (\d+)", self.err)


@pytest.fixture
def alloc(slurm, head, tmp_path):
    made: list[Alloc] = []

    def start(*flags: str) -> Alloc:
        a = Alloc(slurm, tmp_path, head[0], *flags)
        made.append(a)
        return a

    yield start
    for a in made:
        a.cleanup()


def test_jobs_follow_queued_work_within_the_cap(slurm, head, alloc):
    """40 queued tasks: jobs are submitted (squeue shows them), never more than --max-jobs at
    once; their agents join and run every task."""
    connfile = head[0]
    a = alloc("--max-jobs", "2", "--nodes-per-job", "1", "--cpus-per-node", "2",
              "--idle-timeout", "0", "--walltime", "5:00")
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:  # what the batch system says, independently of shoal alloc
        while not done.is_set():
            seen.append(len(a.jobs()))
            time.sleep(0.1)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    start = time.monotonic()
    with Executor(connect=str(connfile)) as ex:
        futs = [ex.submit(Command(["sleep", "0.3"])) for _ in range(40)]
        results = [f.result(timeout=120) for f in futs]
        agents = {f.agent for f in futs}
    elapsed = time.monotonic() - start
    done.set()
    t.join()
    assert all(r.returncode == 0 for r in results)
    assert max(seen) >= 1, "no job of shoal alloc was ever seen in squeue"
    assert max(seen) <= 2, f"more than --max-jobs 2 jobs at once: {max(seen)}"
    # every task ran on an agent of a job that shoal alloc submitted
    assert agents and all(re.fullmatch(r"alloc-\d+-n\d", name or "") for name in agents), agents
    assert a.stop() == 0
    submitted = a.submitted()
    assert 1 <= len(submitted) <= 2, a.err
    assert {name.split("-")[1] for name in agents} <= set(submitted)
    assert "keep running until their agents leave" in a.err  # SIGTERM leaves running jobs be
    assert "joined (2 slots)" in a.err  # --cpus-per-node 2: asked of Slurm, offered as slots
    print(f"40 x 0.3 s tasks through shoal alloc: {elapsed:.2f} s, jobs {submitted}, "
          f"agents {sorted(agents)}")


def test_jobs_end_when_their_agents_are_idle(slurm, head, alloc):
    if not agent_has_idle_timeout(slurm.env):
        pytest.skip("`shoal agent --idle-timeout` is not in this tree yet (issue 11, agent side)")
    connfile = head[0]
    a = alloc("--max-jobs", "1", "--idle-timeout", "2", "--walltime", "5:00")
    with Executor(connect=str(connfile)) as ex:
        futs = [ex.submit(Command(["sleep", "0.2"])) for _ in range(8)]
        assert all(f.result(timeout=120).returncode == 0 for f in futs)
        finished = time.monotonic()
        deadline = finished + 30
        while a.jobs() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = a.jobs()
        gone_after = time.monotonic() - finished
        assert not left, f"jobs {left} still there 30 s after the work ended"
        assert ex.stats()["agents"] == 0
    time.sleep(1.5)  # 5 of shoal alloc's looks (--interval 0.3): it has seen the job end
    assert a.stop() == 0
    assert len(a.submitted()) == 1, a.err
    assert re.search(r"job \d+ ended \(COMPLETED\); 1 agent\(s\) had joined", a.err), a.err
    print(f"idle agents gone and job ended {gone_after:.1f} s after the last task")


FAILING = """#!/bin/bash
#SBATCH --job-name={{job_name}}
#SBATCH --nodes={{nodes}}
#SBATCH --time={{walltime}}
#SBATCH --output={{output}}
echo "module: python/3.11 not found" >&2
exit 1
{{agent}}
"""


def queued_work(connfile, n: int = 10) -> Executor:
    ex = Executor(connect=str(connfile))
    for _ in range(n):
        ex.submit(Command(["true"]))
    return ex


def test_a_failing_job_script_backs_off_and_stops(slurm, head, alloc, tmp_path):
    template = tmp_path / "broken.sh"
    template.write_text(FAILING)
    ex = queued_work(head[0])
    try:
        start = time.monotonic()
        a = alloc("--max-jobs", "2", "--template", str(template), "--retry-delay", "0.5",
                  "--max-failures", "3")
        rc = a.wait(60)
        took = time.monotonic() - start
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    assert rc == 1, a.err
    last = a.err.strip().splitlines()[-1]
    assert "giving up after 3 failures in a row" in last, a.err
    # (Slurm may still show the failed job as COMPLETING, its epilog running, when it is seen)
    m = re.search(r"job (\d+) ended \((?:FAILED|COMPLETING), NonZeroExitCode\) before any "
                  r"agent joined; "
                  r"output (\S+): 'module: python/3.11 not found'", last)
    assert m, last
    assert m.group(2) == str(tmp_path / "alloc" / f"shoal-alloc-{m.group(1)}.out")
    # bounded: 3 failures, plus at most one more job already in flight (--max-jobs 2)
    assert 3 <= len(a.submitted()) <= 4, a.err
    assert "next submission in 0.5 s" in a.err and "next submission in 1 s" in a.err
    assert not a.jobs()
    print(f"broken job script: {len(a.submitted())} jobs, gave up after {took:.1f} s")


def test_a_failing_submission_backs_off_and_stops(slurm, head, alloc):
    ex = queued_work(head[0])
    try:
        a = alloc("--partition", "nosuchpartition", "--retry-delay", "0.2", "--max-failures", "3")
        rc = a.wait(60)
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    assert rc == 1, a.err
    last = a.err.strip().splitlines()[-1]
    assert re.search(r"giving up after 3 failures in a row; last: sbatch \S+/job-3.sh: error: "
                     r"invalid partition specified: nosuchpartition", last), last
    # exactly 3 sbatch calls: one script written per call
    assert sorted(os.listdir(a.workdir)) == ["job-1.sh", "job-2.sh", "job-3.sh"]
    assert a.submitted() == []


def test_stopping_cancels_the_queued_jobs(slurm, head, alloc):
    """A job still waiting in the queue (here: --begin in a minute) is cancelled on SIGTERM."""
    ex = queued_work(head[0])
    try:
        a = alloc("--directive", "#SBATCH --begin=now+60")
        deadline = time.monotonic() + 30
        while not a.jobs("PENDING") and time.monotonic() < deadline:
            time.sleep(0.2)
        pending = a.jobs("PENDING")
        assert len(pending) == 1
        assert a.stop() == 0
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    assert f"stopping: cancelled 1 queued job(s): {pending[0]}" in a.err, a.err
    assert a.jobs() == []
    state = slurm.run("squeue", "-h", "-t", "all", "-j", pending[0], "-o", "%T").stdout.strip()
    assert state in ("CANCELLED", ""), state


def test_the_head_gone_stops_submitting(slurm, head, alloc):
    connfile, head_proc, _ = head
    ex = queued_work(connfile)
    a = alloc("--directive", "#SBATCH --begin=now+60", "--max-jobs", "3", "--backlog", "3")
    deadline = time.monotonic() + 30
    while not a.jobs("PENDING") and time.monotonic() < deadline:
        time.sleep(0.2)
    ex.shutdown(wait=False, cancel_futures=True)
    head_proc.send_signal(signal.SIGTERM)
    head_proc.wait(30)
    assert a.wait(60) == 0
    assert "the head is gone" in a.err, a.err
    n = len(a.submitted())
    assert 1 <= n <= 3
    assert re.search(rf"cancelled {n} queued job\(s\)", a.err), a.err
    assert a.jobs() == []


def test_a_job_whose_agents_never_join_is_cancelled(slurm, head, alloc, tmp_path):
    """Agents that hang instead of joining (here the script sleeps first) do not hold a job
    slot for the whole walltime: past --join-timeout the job is cancelled, as a failure."""
    template = tmp_path / "slow.sh"
    template.write_text(FAILING.replace('echo "module: python/3.11 not found" >&2\nexit 1\n',
                                        "echo waiting; sleep 120\n"))
    ex = queued_work(head[0])
    try:
        a = alloc("--template", str(template), "--join-timeout", "2", "--max-failures", "1")
        rc = a.wait(60)
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    assert rc == 1, a.err
    last = a.err.strip().splitlines()[-1]
    assert re.search(r"giving up after 1 failures in a row; last: job \d+ ran 2 s and no agent "
                     r"joined the head \(can the nodes reach tcp://127\.0\.0\.1:\d+\?\); "
                     r"cancelled it; output \S+: 'waiting'", last), last
    assert a.jobs("PENDING,RUNNING") == []  # (cancelled: it may be COMPLETING a few seconds)


def test_a_queued_job_no_longer_needed_is_cancelled(slurm, head, alloc):
    ex = queued_work(head[0])
    a = alloc("--directive", "#SBATCH --begin=now+60", "--idle-timeout", "1")
    deadline = time.monotonic() + 30
    while not a.jobs("PENDING") and time.monotonic() < deadline:
        time.sleep(0.2)
    pending = a.jobs("PENDING")
    assert len(pending) == 1
    ex.shutdown(wait=False, cancel_futures=True)  # the work is gone
    deadline = time.monotonic() + 30
    while a.jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert a.jobs() == []
    assert a.proc.poll() is None  # it goes on watching
    assert a.stop() == 0
    assert f"no queued work for 1 s: cancelled 1 queued job(s): {pending[0]}" in a.err, a.err
    assert "failure" not in a.err


def test_a_job_sized_to_the_work_starts_an_agent_on_each_node(slurm, head, alloc):
    """--max-nodes-per-job 2 with 20 queued tasks and 1 CPU per node: one 2-node job, whose
    script starts one agent on each of its nodes (srun --ntasks-per-node=1)."""
    a = alloc("--max-jobs", "1", "--max-nodes-per-job", "2", "--cpus-per-node", "1",
              "--idle-timeout", "0", "--walltime", "5:00")
    with Executor(connect=str(head[0])) as ex:
        futs = [ex.submit(Command(["sleep", "0.2"])) for _ in range(20)]
        assert all(f.result(timeout=120).returncode == 0 for f in futs)
        agents = {f.agent for f in futs}
    assert a.stop() == 0
    (job,) = a.submitted()
    assert f"submitted job {job} (2 nodes;" in a.err
    joined = set(re.findall(rf"agent (alloc-{job}-n\d) joined \(1 slots\)", a.err))
    assert len(joined) == 2, a.err
    assert agents <= joined
