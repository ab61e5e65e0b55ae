"""`shoal run --retries`: a line that exits non-zero runs again, up to N more times."""

from __future__ import annotations

import subprocess
import sys


def _run(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", "run", "--no-progress", "--no-summary",
                           *flags, "tasks.txt"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


def test_non_zero_exit_is_retried_until_it_succeeds(tmp_path):
    # each run of the line counts itself; it succeeds on its third run
    (tmp_path / "tasks.txt").write_text(
        "n=$(cat cnt 2>/dev/null || echo 0); n=$((n+1)); echo $n > cnt; test $n -ge 3\n")
    res = _run(tmp_path, "--retries", "3")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "cnt").read_text().strip() == "3"


def test_without_retries_a_non_zero_exit_runs_once_and_fails(tmp_path):
    (tmp_path / "tasks.txt").write_text(
        "n=$(cat cnt 2>/dev/null || echo 0); n=$((n+1)); echo $n > cnt; exit 4\n")
    res = _run(tmp_path)
    assert res.returncode == 1
    assert (tmp_path / "cnt").read_text().strip() == "1"


def test_retries_stop_at_the_limit(tmp_path):
    (tmp_path / "tasks.txt").write_text(
        "n=$(cat cnt 2>/dev/null || echo 0); n=$((n+1)); echo $n > cnt; exit 4\n")
    res = _run(tmp_path, "--retries", "2")
    assert res.returncode == 1
    assert (tmp_path / "cnt").read_text().strip() == "3"  # the first run and two retries
