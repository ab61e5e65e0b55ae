"""Running: failures skip dependents only, Ctrl-C cleans up, scratch placement, CLI errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from script_helpers import REPO, run_shoal, shm_leftovers

from shoal.script.compiler import CompileOptions, compile_source
from shoal.script.runner import RunOptions, run_plan

FAILING = """#!/bin/bash
echo a > a.txt
cat a.txt missing_at_run_time.txt > b.txt    # fails (the file is removed below first)
cat b.txt > c.txt                            # depends on the failure: runs, as in bash
echo independent > d.txt                     # independent branch: runs
cat a.txt > e.txt
"""


@pytest.mark.parametrize("backend", ["shoal", "threads"])
def test_failure_without_set_e_runs_the_rest_and_names_the_line(tmp_path: Path, backend: str
                                                                ) -> None:
    (tmp_path / "missing_at_run_time.txt").write_text("x")
    plan = compile_source(FAILING.encode(), "f.sh", [], CompileOptions(cwd=str(tmp_path)))
    (tmp_path / "missing_at_run_time.txt").unlink()  # now the command on line 3 fails
    out = open(os.devnull, "w")
    report = run_plan(plan, str(tmp_path), RunOptions(backend=backend, stdout=out, stderr=out))
    assert report.exit_code == 0  # bash: the status of the last command
    assert [plan.steps[v].line for v in report.failed] == [3]
    assert report.skipped == []
    assert (tmp_path / "d.txt").read_text() == "independent\n"
    assert (tmp_path / "e.txt").read_text() == "a\n"
    assert (tmp_path / "c.txt").read_text() == "a\n"  # cat wrote a.txt before failing
    assert not list(tmp_path.glob(".shoal-scratch*"))


def test_cli_failure_report_and_exit_status(tmp_path: Path) -> None:
    (tmp_path / "job.sh").write_text("set -e\necho x > x.txt\nsort -k nonsense x.txt > y.txt\n"
                                     "cat y.txt > z.txt\necho fine > w.txt\n")
    r = run_shoal(tmp_path, "job.sh")
    assert r.returncode == 2  # sort's status: set -e stops there
    assert "job.sh:3: command failed with exit status 2 (set -e: the script stops here)" \
        in r.stderr
    assert "2 later command(s) left no trace" in r.stderr
    assert (tmp_path / "x.txt").exists() and (tmp_path / "y.txt").exists()
    assert not (tmp_path / "z.txt").exists() and not (tmp_path / "w.txt").exists()


@pytest.mark.parametrize("backend, sig", [("threads", signal.SIGINT), ("shoal", signal.SIGINT),
                                          ("shoal", signal.SIGTERM)])
def test_ctrl_c_stops_and_removes_scratch(tmp_path: Path, backend: str, sig: int) -> None:
    (tmp_path / "in.txt").write_text("data\n")
    (tmp_path / "job.sh").write_text(
        "cp in.txt tmp.txt\nsleep 60 && cat tmp.txt > out.txt\nrm tmp.txt\n")
    extra = ["--local-threads"] if backend == "threads" else []
    p = subprocess.Popen([sys.executable, "-m", "shoal", "script", *extra, "job.sh"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    # wait until the intermediate exists in scratch and the sleep is running
    while time.time() < deadline:
        if any(Path(d).glob("*tmp.txt") for d in shm_leftovers(p.pid)):
            break
        time.sleep(0.1)
    else:
        p.kill()
        pytest.fail("scratch file never appeared")
    time.sleep(0.5)
    t0 = time.time()
    p.send_signal(sig)
    _out, err = p.communicate(timeout=30)
    assert time.time() - t0 < 20
    assert p.returncode == 130, err
    assert "interrupted" in err
    assert not shm_leftovers(p.pid)
    assert not list(tmp_path.glob(".shoal-scratch*"))
    assert not (tmp_path / "out.txt").exists()


def test_intermediates_go_to_memory_then_disk_when_full(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("x" * 100_000)
    src = "".join(f"cat big.txt > t{k}.txt\ncat t{k}.txt > o{k}.txt\nrm t{k}.txt\n"
                  for k in range(4))
    plan = compile_source(src.encode(), "s.sh", [], CompileOptions(cwd=str(tmp_path)))
    assert len(plan.dag.scratch_groups()) == 4
    # a memory scratch with room for about two of them: the rest spill to disk
    shm = tmp_path / "fake-shm"
    shm.mkdir()
    st = os.statvfs(shm)
    frac = 250_000 / (st.f_bavail * st.f_frsize)
    devnull = open(os.devnull, "w")
    r = run_plan(plan, str(tmp_path), RunOptions(backend="threads", shm_dir=str(shm),
                                                 shm_fraction=frac, stdout=devnull))
    assert r.exit_code == 0
    # intermediates whose lifetimes do not overlap reuse the room: all fit in memory
    assert (r.scratch_shm, r.scratch_disk) == (4, 0)
    src2 = "".join(f"cat big.txt > t{k}.txt\n" for k in range(4)) + "cat t*.txt > all.txt\n" \
        + "rm t*.txt\n"
    plan2 = compile_source(src2.encode(), "s.sh", [], CompileOptions(cwd=str(tmp_path)))
    r2 = run_plan(plan2, str(tmp_path), RunOptions(backend="threads", shm_dir=str(shm),
                                                   shm_fraction=frac, stdout=devnull))
    assert r2.exit_code == 0 and (r2.scratch_shm, r2.scratch_disk) == (2, 2)
    assert (tmp_path / "all.txt").stat().st_size == 400_000
    assert not list(tmp_path.glob("t*.txt")) and not any(shm.iterdir())


@pytest.mark.parametrize("src, msg", [
    ("echo ok\nwhile true; do\n", "job.sh:2: syntax error"),
    ("echo x > a.txt\nif [ -s a.txt ]; then echo y; fi\n",
     "job.sh:2: test -s 'a.txt': its size is known only after line 1 runs: not supported; "
     "run it with bash"),
    ("x=$(python3 -c 'print(1)')\n", "job.sh:1: command substitution runs 'python3'"),
])
def test_cli_bad_input_is_one_error_line(tmp_path: Path, src: str, msg: str) -> None:
    (tmp_path / "job.sh").write_text(src)
    r = run_shoal(tmp_path, "job.sh")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and msg in r.stderr, r.stderr


def test_cli_dry_run_dot_and_strict(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "job.sh").write_text("cat a.txt > b.txt\nmystery b.txt\ncat b.txt > c.txt\n")
    r = run_shoal(tmp_path, "job.sh", extra=("--dry-run", "--dot", "g.dot"))
    assert r.returncode == 0
    assert "#2 line 3 after #0,#1" in r.stdout and "[barrier]" in r.stdout
    assert "unknown programs run as barriers" in r.stderr and "mystery (line 2)" in r.stderr
    assert "n1 -> n2;" in (tmp_path / "g.dot").read_text()
    assert not (tmp_path / "b.txt").exists()  # dry run ran nothing
    r = run_shoal(tmp_path, "job.sh", extra=("--strict",))
    assert r.returncode == 2 and "job.sh:2: unknown program 'mystery'" in r.stderr
