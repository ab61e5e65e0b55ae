# ruff: noqa: F811  (the `serve` fixture is imported, then named as a parameter)
"""`shoal serve` resumes a job cut off by kill -9 of the service: the restarted service runs
the rest of the job's plan, finished commands are not run again, the files are bash's, and
nothing of the killed service's sandboxes outlives it."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.failures.harness import agent_dirs, freeze_tree
from tests.script.script_helpers import run_bash, snapshot
from tests.test_serve_common import needs_aiohttp, needs_sandbox, serve  # noqa: F401

pytestmark = [pytest.mark.timeout(180)]

# Each iteration appends its name to its own ran_*.log: a line per run of that command. The
# glob sees the inputs only; a recompile after the kill would also see the .rev.dat outputs
# (and run more iterations than bash): the resumed job must run the plan it started with.
SCRIPT = """#!/bin/bash
for f in *.dat; do
  echo "$f" >> "ran_$f.log"
  sort -r "$f" > "$f.rev.dat"
  sleep 1
done
cat *.rev.dat > all.txt
wc -l ran_*.log > counts.txt
echo "all done"
"""
INPUTS = {f"{c}.dat": f"{c}1\n{c}3\n{c}2\n".encode() for c in "abcdef"}


def _job_groups(service: int) -> list[Path]:
    """The job control groups the service ``service`` made (none where it has none)."""
    from shoal.service.sandbox_host import host

    h = host()
    return [g for parent in [h.v2, *h.v1.values()] if parent
            for g in Path(parent).glob(f"job-{service}-*")]


def _finished(plan_file: Path, st_dir: Path) -> set[str]:
    """The counter files (ran_*.log) whose appending command has recorded its status."""
    with open(plan_file, "rb") as f:
        plan = pickle.load(f)
    out = set()
    for v, step in enumerate(plan.dag.steps):
        what = step.describe()  # echo a.dat >>ran_a.dat.log
        if what.startswith("echo ") and ">>ran_" in what:
            try:
                if (st_dir / str(v)).read_text().strip():
                    out.add(what.split(">>", 1)[1])
            except OSError:
                continue
    return out


def _freeze(root: int) -> dict[int, bytes]:
    """SIGSTOP ``root`` and every process below it (tests.failures.harness.freeze_tree: a
    process forking as it is stopped leaves nothing outside); pid -> start time."""
    out: dict[int, bytes] = {}
    for pid in freeze_tree(root):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                out[pid] = f.read().rsplit(b")", 1)[1].split()[19]
        except OSError:
            pass
    return out


def _alive(pid: int, started: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == started and fields[0] not in (b"Z", b"X")


def _run_dirs(procs: dict[int, object]) -> set[str]:
    """The run directories (``--connection DIR/connection.json``) of the heads among
    ``procs``."""
    dirs = set()
    for p in procs:
        try:
            # words apart by NULs, or by spaces (a command line run on: shoal.launch.boot)
            words = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").split()
        except OSError:
            continue
        if b"shoal.head" in words and b"--connection" in words:
            dirs.add(os.path.dirname(os.fsdecode(words[words.index(b"--connection") + 1])))
    return dirs


@needs_aiohttp
@needs_sandbox
def test_kill_9_of_the_service_then_the_job_resumes(serve, tmp_path: Path) -> None:
    # the reference: bash on a copy of the inputs
    ref = tmp_path / "ref"
    ref.mkdir()
    for name, data in INPUTS.items():
        (ref / name).write_bytes(data)
    (ref / "job.sh").write_text(SCRIPT)
    b = run_bash(ref, "job.sh")
    assert b.returncode == 0, b.stderr
    (ref / "job.sh").unlink()
    expected = snapshot(ref)
    assert len([k for k in expected if k.endswith(".rev.dat")]) == 6

    srv = serve(extra=("--max-running", "1", "--workers", "2"))
    job = srv.submit(SCRIPT, inputs=INPUTS)["id"]
    work = srv.jobs / job / "work"
    plan_file = srv.jobs / job / "state" / "plan"  # written before any command runs
    st_dir = work / ".shoal-scratch-job" / "st"
    deadline = time.monotonic() + 60
    while not plan_file.exists() or len(_finished(plan_file, st_dir)) < 2:
        assert time.monotonic() < deadline, "the job did not start"  # some commands finished
        time.sleep(0.05)
    assert not (work / "all.txt").exists()  # others not yet
    assert srv.proc is not None
    pid = srv.proc.pid
    # stop the job's processes first, so that what had finished at the kill is known exactly
    # (a command caught between its write and its status record may run again, by design)
    procs = _freeze(pid)  # the service too; it is killed next
    assert any(b"bwrap" in Path(f"/proc/{p}/cmdline").read_bytes() for p in procs
               if _alive(p, procs[p])), "no sandbox under the service"
    finished = _finished(plan_file, st_dir)
    assert len(finished) >= 2, finished
    groups = _job_groups(pid)  # the killed service's control groups: swept at the restart
    from shoal.service.sandbox_host import host

    assert groups or not (host().v2 or host().v1)
    # its runtime's and its agent's: a head or an agent killed with it cannot remove its own
    rundirs = _run_dirs(procs) | agent_dirs(procs)
    os.kill(pid, signal.SIGKILL)  # the service process only: its sandboxes must die with it
    srv.proc.wait()
    deadline = time.monotonic() + 10
    while left := [p for p, t in procs.items() if _alive(p, t)]:
        assert time.monotonic() < deadline, f"processes of the killed service left: {left}"
        time.sleep(0.1)
    for d in rundirs:
        shutil.rmtree(d, ignore_errors=True)
    srv.proc = None
    srv.err.close()
    before = {p.name: p.read_text() for p in work.glob("ran_*.log")}

    srv.start()
    st = srv.wait(job, timeout=90)
    status, _, log = srv.request("GET", f"/api/v1/jobs/{job}/log")
    assert st["state"] == "succeeded" and st["returncode"] == 0, (st, log[-3000:])
    assert st["resumes"] == 1
    assert b"resuming the job" in log, log[-3000:]
    # the restarted runner knew what had finished: by the status files of the steps, and the
    # head answered the chains that had finished from its journal, without running them
    had = re.search(rb"progress: resumed: (\d+) of (\d+) commands had finished", log)
    answered = re.search(rb"(\d+) chains answered from the journal", log)
    assert had and answered, log[-3000:]
    assert int(had[1]) >= 2 and int(answered[1]) >= 1, (had[0], answered[0])
    # a command that had finished was not run again after the restart; one cut off at the
    # kill (its status not recorded) ran again, the others once
    again = set()
    for name in INPUTS:
        text = (work / f"ran_{name}.log").read_text()
        if f"ran_{name}.log" in finished or f"ran_{name}.log" not in before:
            assert text == f"{name}\n", name
        elif text != f"{name}\n":
            assert text == f"{name}\n" * 2, name
            again.add(f"ran_{name}.log")
    assert all((work / n).read_text() == t for n, t in before.items() if n in finished)
    got = snapshot(work)
    assert {k: v for k, v in got.items() if k not in again and k != "counts.txt"} == \
        {k: v for k, v in expected.items() if k not in again and k != "counts.txt"}
    assert again or got == expected
    assert log.count(b"all done") == 1
    assert not [g for g in groups if g.exists()], groups
    # what the job kept to resume is gone once it finished
    assert not (srv.jobs / job / "state").exists()
    assert not list(work.glob(".shoal-scratch-*"))


@needs_aiohttp
@needs_sandbox
def test_a_clean_stop_resumes_too_and_no_resume_fails(serve) -> None:
    srv = serve(extra=("--max-running", "1", "--workers", "1"))
    job = srv.submit("echo one > one.txt\nsleep 3\necho two > two.txt\n")["id"]
    work = srv.jobs / job / "work"
    deadline = time.monotonic() + 60
    while not (work / "one.txt").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert srv.stop() == 0  # SIGTERM: the job is stopped, and stays "running" in the store
    srv.start()
    st = srv.wait(job)
    assert st["state"] == "succeeded" and st["resumes"] == 1, st
    log = srv.request("GET", f"/api/v1/jobs/{job}/log")[2]
    assert b"the job resumes at its next start" in log
    had = re.search(rb"progress: resumed: (\d+) of 3 commands had finished", log)
    assert had and int(had[1]) >= 1, log[-2000:]
    assert (work / "two.txt").read_text() == "two\n"
    # the same service started with --no-resume fails a job cut off by the restart
    job = srv.submit("sleep 30\n")["id"]
    while srv.json("GET", f"/api/v1/jobs/{job}")["state"] != "running":
        time.sleep(0.05)
    srv.stop()
    srv.extra = ("--no-resume",)
    srv.start()
    st = srv.json("GET", f"/api/v1/jobs/{job}")
    assert st["state"] == "failed" and "not resumed" in st["reason"], st
    assert not (srv.jobs / job / "state").exists()


@needs_sandbox
def test_a_run_that_had_ended_is_not_run_again(tmp_path: Path) -> None:
    """The service died after the job's end but before it noted it: the resume finds the
    exit status the run left and runs nothing."""
    from shoal.service.sandbox import Limits, run_job

    job, data = tmp_path / "job", tmp_path / "data"
    job.mkdir()
    data.mkdir()
    (job / "script.sh").write_text("echo run >> count.txt\nexit 3\n")
    for _ in range(2):
        r = run_job(job / "script.sh", [], job_dir=job, data_dir=data, limits=Limits(),
                    log=job / "log", resumable=True)
        assert (r.returncode, r.reason) == (3, None), (job / "log").read_text()
    assert (job / "work" / "count.txt").read_text() == "run\n"
    assert "resumed: the job had ended (exit status 3)" in (job / "log").read_text()


CHAIN = """echo one >> count.txt
sort count.txt > a.txt
sleep 3 < a.txt
sort a.txt > b.txt
cat b.txt > c.txt
echo end
"""


def test_a_chain_cut_midway_skips_its_finished_commands(tmp_path: Path) -> None:
    """The job runner itself (no sandbox): killed with its whole tree while the first chain
    (echo >> count, sort, sleep) sleeps, then started again on the same state."""
    import subprocess
    import sys

    from tests.script.script_helpers import REPO

    ref, work, state = tmp_path / "ref", tmp_path / "work", tmp_path / "state"
    for d in (ref, work, state):
        d.mkdir()
    (tmp_path / "job.sh").write_text(CHAIN)
    assert run_bash(ref, str(tmp_path / "job.sh")).returncode == 0
    st_dir = work / ".shoal-scratch-job" / "st"

    def runner() -> subprocess.Popen[bytes]:
        w = os.open(os.devnull, os.O_WRONLY)  # its status line is not read here
        p = subprocess.Popen([sys.executable, "-m", "shoal.service.sandbox_job", "--status-fd",
                              str(w), "--workers", "2", "--name", "job.sh", "--state",
                              str(state), str(tmp_path / "job.sh")], cwd=work, pass_fds=(w,),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        os.close(w)
        return p

    p = runner()
    deadline = time.monotonic() + 60
    while not (st_dir / "1").exists():  # echo and sort done, the sleep running
        assert time.monotonic() < deadline and p.poll() is None, "the runner did not start"
        time.sleep(0.05)
    procs = _freeze(p.pid)  # the runner too: it must start nothing more
    assert not (st_dir / "2").exists() and not (work / "b.txt").exists()
    # its runtime's and its agent's: a head or an agent killed with it cannot remove its own
    rundirs = _run_dirs(procs) | agent_dirs(procs)
    for pid in procs:
        os.kill(pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 10
    while [q for q, t in procs.items() if _alive(q, t)]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for d in rundirs:
        shutil.rmtree(d, ignore_errors=True)

    p = runner()
    out, _ = p.communicate(timeout=90)
    assert p.returncode == 0, out.decode()
    # echo, sort (and `echo end`, its own chain, when it had run)
    assert re.search(rb"progress: resumed: [23] of 6 commands had finished", out), out.decode()
    assert (work / "count.txt").read_text() == "one\n"  # not appended twice
    assert out.count(b"end\n") == 1
    assert snapshot(work) == snapshot(ref)


def test_a_job_is_resumed_at_most_three_times(tmp_path: Path) -> None:
    """The job table: a job found running at a restart is queued again (resumes + 1), up to
    MAX_RESUMES; then failed with the count. Without resume: failed at once."""
    from shoal.service.store import MAX_RESUMES, QUEUED, RUNNING, Job, Store

    store = Store(tmp_path)
    store.add(Job("a" * 16, "alice", "job.sh", [], RUNNING, time.time()))
    store.add(Job("b" * 16, "alice", "job.sh", [], QUEUED, time.time() - 10))
    for k in range(1, MAX_RESUMES + 1):
        failed, resumed, queued = store.recover(resume=True)
        assert (failed, resumed) == ([], ["a" * 16]), k
        assert queued == ["a" * 16, "b" * 16]  # the resumed job first
        job = store.get("a" * 16)
        assert job is not None and (job.state, job.resumes) == (QUEUED, k)
        store.update("a" * 16, state=RUNNING)  # started again, cut off again
    failed, resumed, _ = store.recover(resume=True)
    assert (failed, resumed) == (["a" * 16], [])
    job = store.get("a" * 16)
    assert job is not None and job.state == "failed"
    assert job.reason == (f"the service stopped while the job ran, {MAX_RESUMES + 1} times "
                          f"(resumed at most {MAX_RESUMES} times)")
    store.update("b" * 16, state=RUNNING)
    assert store.recover(resume=False)[0] == ["b" * 16]
    assert "not resumed" in (store.get("b" * 16).reason or "")  # type: ignore[union-attr]
    store.close()
