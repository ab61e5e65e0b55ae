"""Stated run times (``Executor.options(estimate=...)``, ``#shoal: estimate=5m``): the head
starts tasks with estimates longest first (docs/sim.md). A real local runtime of one slot:
while it is busy, tasks are submitted shortest first and must start longest first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from shoal import Executor
from shoal.cli.run import BadLine, Line, parse_taskfile
from shoal.client.options import estimate_value

from .conftest import PY, ROOT

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests


def hold(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.01)


def mark(log: str, name: str) -> str:
    with open(log, "a") as fh:
        fh.write(name + "\n")
    return name


@pytest.mark.parametrize(("value", "seconds"), [
    (3, 3.0), (0.5, 0.5), ("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("5min", 300.0),
    ("2h", 7200.0), ("1e3", 1000.0)])
def test_estimate_values(value, seconds):
    assert estimate_value(value) == seconds


@pytest.mark.parametrize("value", [0, -1, "soon", "5d", "inf", "nan", True, None, [3]])
def test_bad_estimates_are_one_line_errors(value):
    with pytest.raises(ValueError, match=r"^estimate must be "):
        estimate_value(value)


def test_tasks_with_estimates_start_longest_first(tmp_path: Path) -> None:
    go, log = str(tmp_path / "go"), str(tmp_path / "log")
    with Executor(workers=1, prefetch=0) as ex:
        first = ex.submit(hold, go)  # the only slot is busy while the others queue
        deadline = time.monotonic() + 60
        while not first.running() and time.monotonic() < deadline:
            time.sleep(0.02)
        futs = [ex.options(estimate=est).submit(mark, log, name)
                for name, est in (("short", 0.01), ("long", "2m"), ("mid", 5))]
        # no estimate: it joins the longest bucket queued when it comes (docs/sim.md)
        plain = ex.submit(mark, log, "plain")
        with pytest.raises(ValueError, match="estimate must be"):
            ex.options(estimate="later")
        time.sleep(0.3)  # every submission has reached the head
        open(go, "w").close()
        first.result(timeout=60)
        assert [f.result(timeout=60) for f in futs] == ["short", "long", "mid"]
        plain.result(timeout=60)
    assert Path(log).read_text().split() == ["long", "plain", "mid", "short"]


def test_estimate_directive_in_a_task_file(tmp_path: Path) -> None:
    items = list(parse_taskfile(b"#shoal: estimate=5m cores=1\necho a\n#shoal: estimate=x\n"
                                b"echo b\necho c\n", "t.txt"))
    assert items[0] == Line(2, "echo a", {"estimate": 300.0, "cores": 1})
    assert isinstance(items[1], BadLine) and items[1].error.startswith(
        "t.txt:3: #shoal: estimate must be seconds")
    assert items[2] == Line(5, "echo c")
    # shoal run: the estimated lines start longest first once the slot frees
    log = tmp_path / "log"
    tasks = tmp_path / "tasks.txt"
    tasks.write_text(f"sleep 0.5\n#shoal: estimate=1\necho short >> {log}\n"
                     f"#shoal: estimate=1h\necho long >> {log}\n")
    r = subprocess.run([PY, "-m", "shoal", "run", "-j", "1", "--no-summary", str(tasks)],
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr
    assert log.read_text().split() == ["long", "short"]
