# ruff: noqa: F811  (the `serve` fixture is imported, then named as a parameter)
"""`shoal serve` resumes a job cut off by kill -9 of the service: the restarted service runs
the rest of the job's plan, finished commands are not run again, the files are bash's, and
nothing of the killed service's sandboxes outlives it."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.script.script_helpers import run_bash, snapshot
from tests.test_serve_common import needs_aiohttp, needs_sandbox, serve  # noqa: F401

pytestmark = [needs_aiohttp, needs_sandbox, pytest.mark.timeout(180)]

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


def _descendants(root: int) -> dict[int, bytes]:
    """pid -> start time of every process below ``root`` (from /proc)."""
    children: dict[int, list[int]] = {}
    start: dict[int, bytes] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
        start[int(name)] = fields[19]
    out: dict[int, bytes] = {}
    stack = [root]
    while stack:
        for c in children.get(stack.pop(), []):
            out[c] = start[c]
            stack.append(c)
    return out


def _job_groups(service: int) -> list[Path]:
    """The job control groups the service ``service`` made (none where it has none)."""
    from shoal.service.sandbox_host import host

    h = host()
    return [g for parent in [h.v2, *h.v1.values()] if parent
            for g in Path(parent).glob(f"job-{service}-*")]


def _alive(pid: int, started: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == started and fields[0] not in (b"Z", b"X")


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
    deadline = time.monotonic() + 60
    while len(list(work.glob("ran_*.log"))) < 2:  # some commands finished, others not yet
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.05)
    assert not (work / "all.txt").exists()
    assert srv.proc is not None
    pid = srv.proc.pid
    procs = _descendants(pid)
    assert any(b"bwrap" in Path(f"/proc/{p}/cmdline").read_bytes() for p in procs
               if _alive(p, procs[p])), "no sandbox under the service"
    groups = _job_groups(pid)  # the killed service's control groups: swept at the restart
    from shoal.service.sandbox_host import host

    assert groups or not (host().v2 or host().v1)
    os.kill(pid, signal.SIGKILL)  # the service process only: its sandboxes must die with it
    srv.proc.wait()
    deadline = time.monotonic() + 10
    while left := [p for p, t in procs.items() if _alive(p, t)]:
        assert time.monotonic() < deadline, f"processes of the killed service left: {left}"
        time.sleep(0.1)
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
    # every command ran once: a finished one was not run again after the restart
    for name in INPUTS:
        assert (work / f"ran_{name}.log").read_text() == f"{name}\n", name
    assert all((work / n).read_text() == t for n, t in before.items())
    assert snapshot(work) == expected
    assert log.count(b"all done") == 1
    assert not [g for g in groups if g.exists()], groups
    # what the job kept to resume is gone once it finished
    assert not (srv.jobs / job / "state").exists()
    assert not list(work.glob(".shoal-scratch-*"))


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
