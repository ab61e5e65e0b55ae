"""Task-file resources: ``#shoal:`` directives and ``--gpus-per-task`` (docs/resources.md)."""

from __future__ import annotations

import subprocess
import time

import pytest

from shoal import Executor
from shoal.cli.run import BadLine, Line, parse_taskfile

from .conftest import PY, ROOT


def parse(text: str) -> list[Line | BadLine]:
    return list(parse_taskfile(text.encode(), "t.txt"))


def test_directives_apply_to_the_next_command_only():
    items = parse(
        "echo plain\n"
        "#shoal: cores=4 gpus=1 memory=2G\n"
        "echo big\n"
        "echo after\n"
        "# shoal: ranks=8\n"          # a space after '#' is taken too
        "# an ordinary comment between directive lines\n"
        "#shoal: nodes=2 exclusive\n"
        "\n"
        "mpirun-me \\\n  --flag\n"
        "#shoal: memory=1.5GiB exclusive=false\n"
        "echo last\n"
    )
    assert items == [
        Line(1, "echo plain"),
        Line(3, "echo big", {"cores": 4, "gpus": 1, "memory": 2 << 30}),
        Line(4, "echo after"),
        Line(9, "mpirun-me   --flag", {"ranks": 8, "nodes": 2, "exclusive": True}),
        Line(12, "echo last", {"memory": 3 << 29, "exclusive": False}),
    ]


@pytest.mark.parametrize("directive, message", [
    ("#shoal: bogus=1", "t.txt:2: #shoal: unknown resource 'bogus' (known: cores, gpus, memory"),
    ("#shoal: cores=0", "t.txt:2: #shoal: cores must be an int >= 1, not 0"),
    ("#shoal: gpus=two", "t.txt:2: #shoal: gpus must be an int >= 1, not 'two'"),
    ("#shoal: gpus", "t.txt:2: #shoal: gpus needs a value (gpus=N)"),
    ("#shoal: memory=12Q", "t.txt:2: #shoal: memory must be bytes or a size such as '512M'"),
    ("#shoal: nodes=2", "t.txt:2: #shoal: nodes=2 needs ranks="),
    ("#shoal: ranks=2 nodes=3", "t.txt:2: #shoal: nodes=3 with ranks=2: every node needs"),
    ("#shoal: cores=2 cores=3", "t.txt:2: #shoal: cores given twice for the same command"),
    ("#shoal: exclusive=maybe", "t.txt:2: #shoal: exclusive takes no value (or true/false)"),
])
def test_a_bad_directive_is_reported_and_stops_only_its_command(directive, message):
    items = parse(f"echo first\n{directive}\necho skipped\necho third\n")
    assert items[0] == Line(1, "echo first") and items[2] == Line(4, "echo third")
    bad = items[1]
    assert isinstance(bad, BadLine) and bad.number == 2
    assert bad.error.startswith(message), bad.error
    assert bad.error.endswith("; the command on line 3 is not run")


def test_directive_errors_across_lines_and_at_the_end():
    items = parse("#shoal: nodes=2\n#shoal: cores=2\necho x\n#shoal: cores=2\n")
    assert [type(i) for i in items] == [BadLine, BadLine]
    assert items[0].error.startswith("t.txt:1: #shoal: nodes=2 needs ranks=")  # the first line
    assert items[1].error == ("t.txt:4: #shoal: directive before no command "
                              "(it applies to the next command line)")
    # a line that cannot be decoded takes its directive with it
    items = list(parse_taskfile(b"#shoal: cores=2\n\xff\necho ok\n", "t.txt"))
    assert isinstance(items[0], BadLine) and items[1] == Line(3, "echo ok")


def run_shoal(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "shoal", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def window(name: str, seconds: float) -> str:
    """A command that records when it ran in ``name``: 'start end' (epoch seconds)."""
    return (f"s=$(date +%s.%N); sleep {seconds}; e=$(date +%s.%N); "
            f"echo $s $e $OMP_NUM_THREADS > {name}")


def read_window(path) -> tuple[float, float]:
    start, end = path.read_text().split()[:2]
    return float(start), float(end)


def omp_threads(path) -> str | None:
    words = path.read_text().split()
    return words[2] if len(words) > 2 else None


def test_a_cores_directive_reaches_the_task(head, tmp_path):
    """On an agent of 4 slots a '#shoal: cores=4' command runs alone: its time window
    overlaps no other command's, while the one-core commands do run side by side; the
    agent tells it OMP_NUM_THREADS=4."""
    connfile, _, add_agent = head
    add_agent("--slots", "4", "--workers", "0")
    with Executor(connect=str(connfile), min_agents=1):
        pass
    lines = [window(tmp_path / f"small{i}", 0.6) for i in range(4)]
    lines.insert(2, "#shoal: cores=4\n" + window(tmp_path / "big", 0.6))
    lines.append("#shoal: cores=5\necho never")   # more than any agent has: fails, run goes on
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("\n".join(lines) + "\n")
    t0 = time.monotonic()
    r = run_shoal(["run", "--connect", str(connfile), "--no-progress", str(tasks)])
    wall = time.monotonic() - t0
    assert "never" not in r.stdout
    big = read_window(tmp_path / "big")
    small = [read_window(tmp_path / f"small{i}") for i in range(4)]
    for s in small:
        assert s[1] <= big[0] or s[0] >= big[1], (big, small)
    overlaps = sum(1 for i, a in enumerate(small) for b in small[i + 1:]
                   if a[0] < b[1] and b[0] < a[1])
    assert overlaps >= 1, small  # the agent does run one-core commands side by side
    assert omp_threads(tmp_path / "big") == "4"
    assert r.returncode == 1, r.stderr  # the cores=5 line failed; the others ran
    assert wall < 30


def test_gpus_per_task_flag_is_checked():
    r = run_shoal(["run", "--gpus-per-task", "0", "/dev/null"])
    assert r.returncode == 2 and "--gpus-per-task must be at least 1, not 0" in r.stderr


def test_gpu_and_mpi_directives_reach_their_tasks(head, tmp_path):
    """--gpus-per-task 1 on an agent of 2 GPUs: each command sees one device; a
    '#shoal: ranks=2' command runs as 2 MPI ranks; '#shoal: gpus=3' fails alone."""
    connfile, _, add_agent = head
    add_agent("--slots", "4", "--workers", "0", "--gpus", "2")
    with Executor(connect=str(connfile), min_agents=1):
        pass
    tasks = tmp_path / "tasks.txt"
    tasks.write_text(
        "".join(f'echo gpu-{i}=$CUDA_VISIBLE_DEVICES\n' for i in range(3))
        + "#shoal: ranks=2 gpus=1\necho rank=$OMPI_COMM_WORLD_RANK:$CUDA_VISIBLE_DEVICES\n"
        + "#shoal: gpus=3\necho never\n")
    r = run_shoal(["run", "--connect", str(connfile), "--gpus-per-task", "1", "--no-progress",
                   str(tasks)])
    out = r.stdout.split()
    assert sorted(w.split("=")[0] for w in out if w.startswith("gpu-")) == ["gpu-0", "gpu-1",
                                                                            "gpu-2"], r.stdout
    assert all(w.split("=")[1] in ("0", "1") for w in out if w.startswith("gpu-")), r.stdout
    ranks = sorted(w for w in out if w.startswith("rank="))
    assert [w.split(":")[0] for w in ranks] == ["rank=0", "rank=1"], (r.stdout, r.stderr)
    # the ranks on a node see the GPUs placed there: one per rank, both ranks here
    assert {w.split(":")[1] for w in ranks} == {"0,1"}, ranks
    assert "never" not in r.stdout
    assert "asks for 3 GPUs" in r.stderr and r.returncode == 1, r.stderr
