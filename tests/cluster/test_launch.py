"""Launch on the real local Slurm: `python -m shoal` and `shoal run` inside an allocation use
every node with no flags; scancel ends everything; launch failures name the node quickly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROG = """\
import collections, os, time
from shoal import futures

def where(i):
    time.sleep(0.05)
    return os.environ.get("SLURMD_NODENAME")

ex = futures._executor()
print("slots", ex.slots, flush=True)
print("nodes", sorted(collections.Counter(futures.map(where, range(64), chunksize=1)).items()))
"""


def _pids_mentioning(text: str) -> set[int]:
    """Processes whose command line mentions ``text`` (this test's own directory)."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        out.add(int(d))
            except OSError:
                pass
    return out


def _alive(pids: set[int]) -> set[int]:
    left = set()
    for p in pids:
        try:
            with open(f"/proc/{p}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] != b"Z":
            left.add(p)
    return left


def _sbatch_wait(slurm, cwd, script: str = "job.sh", timeout: float = 180) -> str:
    """Submit and wait for the end (polling: `sbatch --wait` checks every 10 s); the job's
    ExitCode as scontrol shows it."""
    job = slurm.run("sbatch", "--parsable", script, cwd=cwd).stdout.strip()
    assert job, "sbatch failed"
    deadline = time.monotonic() + timeout
    while slurm.run("squeue", "-h", "-j", job).stdout.strip():
        assert time.monotonic() < deadline, f"job {job} still queued or running"
        time.sleep(0.2)
    info = slurm.run("scontrol", "show", "job", job).stdout
    return next((w.split("=", 1)[1] for w in info.split() if w.startswith("ExitCode=")), "?")


def test_salloc_python_m_shoal_uses_every_node(slurm, tmp_path) -> None:
    (tmp_path / "prog.py").write_text(PROG)
    r = slurm.run("salloc", "-N", "4", "--exclusive", "-t", "5", PY, "-m", "shoal", "prog.py",
                  cwd=tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "slots 16" in r.stdout, r.stdout  # 4 nodes x 4 CPUs, from the job's variables
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("nodes"))
    counts = dict(eval(line[len("nodes "):]))  # noqa: S307 - our own program's repr
    assert sorted(counts) == ["n1", "n2", "n3", "n4"], line
    assert sum(counts.values()) == 64
    assert not os.path.exists(tmp_path / ".shoal"), os.listdir(tmp_path / ".shoal")


def test_sbatch_shoal_run_uses_every_node(slurm, tmp_path) -> None:
    (tmp_path / "tasks.txt").write_text('echo "$SLURMD_NODENAME"; sleep 0.2\n' * 32)
    (tmp_path / "job.sh").write_text(textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH -N 4
        #SBATCH --exclusive
        #SBATCH -t 5
        #SBATCH -o out.txt
        exec {PY} -m shoal run --no-summary tasks.txt
        """))
    code = _sbatch_wait(slurm, tmp_path)
    out = (tmp_path / "out.txt").read_text()
    assert code == "0:0", out
    nodes = [ln for ln in out.splitlines() if ln in ("n1", "n2", "n3", "n4")]
    assert len(nodes) == 32, out
    assert set(nodes) == {"n1", "n2", "n3", "n4"}, out


def test_scancel_mid_run_leaves_no_shoal_process(slurm, tmp_path) -> None:
    (tmp_path / "tasks.txt").write_text('echo "$SLURMD_NODENAME"; sleep 0.5\n' * 400)
    (tmp_path / "job.sh").write_text(textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH -N 4
        #SBATCH --exclusive
        #SBATCH -t 5
        #SBATCH -o out.txt
        exec {PY} -m shoal run --no-summary tasks.txt
        """))
    job = slurm.run("sbatch", "--parsable", "job.sh", cwd=tmp_path).stdout.strip()
    deadline = time.monotonic() + 120
    out = tmp_path / "out.txt"
    while time.monotonic() < deadline:  # running on every node: mid-run
        text = out.read_text() if out.exists() else ""
        if len({ln for ln in text.splitlines() if ln in ("n1", "n2", "n3", "n4")}) == 4:
            break
        time.sleep(0.2)
    else:
        slurm.run("scancel", job)
        raise AssertionError("the job never ran on all 4 nodes: " + (out.read_text() if out.exists() else ""))
    pids = _pids_mentioning(str(tmp_path))
    # the program, its head, srun (2 processes), and one agent (with workers) per node
    assert len(pids) >= 7, pids
    slurm.run("scancel", job)
    deadline = time.monotonic() + 20
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pids), f"left after scancel: {_alive(pids)}"
    assert not _pids_mentioning(str(tmp_path))


def test_failed_nodes_are_named_and_the_run_goes_on(slurm, tmp_path) -> None:
    """Inside one allocation: a node srun cannot start (not in the job) is named within
    seconds and the others run; an srun that cannot start at all names every node."""
    (tmp_path / "prog.py").write_text(textwrap.dedent("""\
        import os, sys, time
        from shoal import Executor, ExecutorError
        from shoal.launch.allocation import Node, discover
        from shoal.launch.launchers import SrunLauncher

        alloc = discover()
        extra = alloc.__class__(alloc.kind, alloc.nodes + (Node("n9", 2),), alloc.job_id)
        t0 = time.monotonic()
        with Executor(allocation=extra) as ex:
            print("started", round(time.monotonic() - t0, 1), "slots", ex.slots,
                  sorted(ex.submit(os.environ.get, "SLURMD_NODENAME").result() for _ in [0]),
                  flush=True)
        t0 = time.monotonic()
        try:
            Executor(launcher=SrunLauncher(extra=["--no-such-option"]))
        except ExecutorError as exc:
            print("failed", round(time.monotonic() - t0, 1), str(exc), flush=True)
        """))
    r = slurm.run("salloc", "-N", "4", "--exclusive", "-t", "5", PY, "prog.py", cwd=tmp_path,
                  timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    started = next(ln for ln in r.stdout.splitlines() if ln.startswith("started")).split()
    assert float(started[1]) < 15 and started[3] == "16", r.stdout
    err = r.stderr.splitlines()
    n9 = [ln for ln in err if ln.startswith("shoal: node n9: srun exited with status")]
    assert len(n9) == 1, r.stderr
    assert "going on with 4 of 5 nodes (16 slots)" in r.stderr
    failed = next(ln for ln in r.stdout.splitlines() if ln.startswith("failed")).split(maxsplit=2)
    assert float(failed[1]) < 15 and "no agent joined the head at tcp://" in failed[2], r.stdout
    # one line for the four nodes of the one srun that could not start
    line = next(ln for ln in err if ln.startswith("shoal: nodes n[1-4]: srun exited with status"))
    assert "unrecognized option '--no-such-option'" in line, line


def test_launcher_that_cannot_start_names_the_node_within_seconds(tmp_path) -> None:
    (tmp_path / "prog.py").write_text(PROG)
    t0 = time.monotonic()
    r = subprocess.run([PY, "-m", "shoal", "--launcher", "ssh", "--hosts", "nosuchhost.invalid:2",
                        "prog.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": ROOT})
    took = time.monotonic() - t0
    assert r.returncode == 3, r.stderr
    assert took < 15
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("shoal: node nosuchhost.invalid: ssh exited with status 255 "
                               "before its agent joined: ssh: Could not resolve hostname"), lines
    assert lines[-1].startswith("shoal: no agent joined the head at tcp://"), lines
    assert len(lines) == 2, lines
