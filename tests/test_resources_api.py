"""Task resources through the API: ``ex.options(gpus=, memory=, ranks=, nodes=, exclusive=)``,
``Executor(gpus=, min_agents=)``, ``ex.wait_for_agents`` (docs/resources.md)."""

from __future__ import annotations

import sys
import time

import pytest

from shoal import Command, Executor
from shoal.client import options as O
from shoal.launch.allocation import Allocation, Node


def test_resource_options_are_validated_at_submission(ex):
    bad = [
        (dict(gpus=0), "gpus must be an int >= 1, not 0"),
        (dict(gpus=True), "gpus must be an int >= 1, not True"),
        (dict(gpus=1.0), "gpus must be an int >= 1, not 1.0"),
        (dict(cores=0), "cores must be an int >= 1, not 0"),
        (dict(memory=0), "memory must be an int >= 1 (bytes) or a size such as '4G', not 0"),
        (dict(memory="lots"), "memory must be bytes or a size such as '512M', '4G', '1.5GiB', "
                              "not 'lots'"),
        (dict(memory="unlimited"), "memory must be bytes or a size"),
        (dict(ranks=0), "ranks must be an int >= 1, not 0"),
        (dict(nodes=2), "nodes=2 needs ranks=: nodes spread the ranks of an MPI task"),
        (dict(ranks=2, nodes=3), "nodes=3 with ranks=2: every node needs at least one rank"),
        (dict(exclusive="yes"), "exclusive must be True or False, not 'yes'"),
    ]
    for kw, message in bad:
        with pytest.raises(ValueError) as info:
            ex.options(**kw)
        assert str(info.value).startswith(message), (kw, info.value)


def test_ranks_take_a_command_not_a_python_function(ex):
    opts = ex.options(ranks=4)
    with pytest.raises(ValueError, match=r"ranks= runs a Command through MPI .* not a Python "
                                         r"function \('len'\): submit Command\(\[\.\.\.\]\) instead"):
        opts.submit(len, "abc")
    with pytest.raises(ValueError, match="use it with submit"):
        opts.map(len, ["abc"])


def test_only_requested_resources_travel():
    # the opts a task carries: nothing for defaults, only the keys asked for otherwise
    assert O.resource_opts() == {}
    assert O.resource_opts(gpus=1, memory="1.5GiB") == {"gpus": 1, "memory": 3 << 29}
    assert O.resource_opts(ranks=4, nodes=2, exclusive=True) == {
        "ranks": 4, "nodes": 2, "exclusive": True}
    assert O.memory_value("512M") == 512 << 20 and O.memory_value("4G") == 4 << 30
    assert O.memory_value("2GB") == 2 * 10**9 and O.memory_value(4096) == 4096


def test_resource_options_keep_plain_tasks_running(ex):
    # resource requests an agent of the local default can hold change nothing else
    assert ex.options(cores=1, exclusive=False).submit(pow, 2, 5).result(30) == 32
    assert ex.submit(Command([sys.executable, "-c", "print(6 * 7)"])).result(30).stdout == b"42\n"


def test_executor_resource_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="gpus must be an int >= 0, not -1"):
        Executor(gpus=-1)
    with pytest.raises(ValueError, match="memory must be"):
        Executor(memory="much")
    with pytest.raises(ValueError, match="min_agents must be an int >= 1, not 0"):
        Executor(min_agents=0)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="min_agents=2: the local default has one agent"):
        Executor(workers=1, min_agents=2)
    assert time.monotonic() - t0 < 10
    with pytest.raises(ValueError, match=r"gpus= and memory= describe the local agent: with "
                                         r"connect=, give them to each `shoal agent`"):
        Executor(connect=str(tmp_path / "run.json"), gpus=2)
    hosts = Allocation("hosts", (Node("localhost", 2),), source="test")
    with pytest.raises(ValueError, match=r"gpus= and memory= describe the local default's agent: "
                                         r"in this hosts allocation each node's agent finds"):
        Executor(allocation=hosts, memory="1G")


def test_wait_for_agents(head):
    connfile, _, add_agent = head
    with Executor(connect=str(connfile)) as ex:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match=r"waited 0.3 s for 1 agent at tcp://127.0.0.1:\d+: "
                                               r"0 joined \(none\)"):
            ex.wait_for_agents(1, timeout=0.3)
        assert time.monotonic() - t0 < 3
        add_agent("--slots", "1", "--workers", "1", "--name", "first")
        found = ex.wait_for_agents(1, timeout=30)
        assert [a.name for a in found] == ["first"] and found[0].slots == 1
        with pytest.raises(TimeoutError, match=r"for 2 agents at .*: 1 joined \(first on \S+\)"):
            ex.wait_for_agents(2, timeout=0.3)
        add_agent("--slots", "1", "--workers", "1", "--name", "second")
        assert {a.name for a in ex.wait_for_agents(2, timeout=30)} == {"first", "second"}
        assert ex.submit(pow, 3, 2).result(30) == 9
    # min_agents= waits in the constructor, and fails it with the same message
    with Executor(connect=str(connfile), min_agents=2, start_timeout=30) as ex:
        assert len(ex.agents()) == 2
    with pytest.raises(TimeoutError, match=r"for 3 agents .*: 2 joined \((first|second) on "):
        Executor(connect=str(connfile), min_agents=3, start_timeout=0.5)


# ---- resources end to end: a real head and agents (the head counts, the agent assigns) ----

def windows(results) -> list[tuple[str, float, float]]:
    """(what the command saw, start, end) of commands printed by ``timed``."""
    out = []
    for r in results:
        seen, start, end = r.stdout.decode().split()
        out.append((seen, float(start), float(end)))
    return out


def timed(show: str, seconds: float = 0.5) -> Command:
    """A command that prints ``show`` (expanded by sh) and when it ran."""
    return Command(f's=$(date +%s.%N); sleep {seconds}; echo "{show}" $s $(date +%s.%N)')


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = top = 0
    for _, step in edges:
        now += step
        top = max(top, now)
    return top


def overlap(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_gpu_tasks_each_see_only_their_own_device(head):
    """An agent told --gpus 4: eight one-GPU commands each see exactly one device (in
    every vendor's variable), no two running at once share one, and four run side by side."""
    connfile, _, add_agent = head
    add_agent("--slots", "8", "--workers", "0", "--gpus", "4")
    with Executor(connect=str(connfile), min_agents=1) as ex:
        assert [a.gpus for a in ex.agents()] == [4]
        futs = [ex.options(gpus=1).submit(
            timed("$CUDA_VISIBLE_DEVICES|$ROCR_VISIBLE_DEVICES|$ZE_AFFINITY_MASK", 0.6))
            for _ in range(8)]
        runs = windows(f.result(60) for f in futs)
    for seen, _, _ in runs:
        cuda, rocr, ze = seen.split("|")
        assert cuda in {"0", "1", "2", "3"} and rocr == cuda and ze == cuda, seen
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            assert not (overlap(a, b) and a[0] == b[0]), (a, b)
    assert 2 <= most_at_once([(s, e) for _, s, e in runs]) <= 4, runs


def test_impossible_requests_fail_at_once_and_the_run_goes_on(head):
    connfile, _, add_agent = head
    add_agent("--slots", "2", "--workers", "1", "--gpus", "0", "--memory", "1G")
    with Executor(connect=str(connfile), min_agents=1) as ex:
        t0 = time.monotonic()
        gpu_cmd = ex.options(gpus=2).submit(Command("echo never"))
        gpu_call = ex.options(gpus=1).submit(pow, 2, 2)
        too_big = ex.options(memory="2G").submit(Command("echo never"))
        too_many = ex.options(cores=3).submit(Command("echo never"))
        for fut, words in ((gpu_cmd, ("2", "gpu")), (gpu_call, ("1", "gpu")),
                           (too_big, ("memory",)), (too_many, ("3", "core"))):
            exc = fut.exception(30)
            assert exc is not None, fut.result()
            text = str(exc).lower()
            assert all(w in text for w in words), text
        assert time.monotonic() - t0 < 10
        assert ex.submit(Command("echo fine")).result(30).stdout == b"fine\n"
        assert ex.submit(pow, 2, 3).result(30) == 8


def test_memory_is_counted(head):
    """An agent of 1 GiB: tasks of 512 MiB run at most two at a time, though slots allow 4."""
    connfile, _, add_agent = head
    add_agent("--slots", "4", "--workers", "0", "--memory", "1G")
    with Executor(connect=str(connfile), min_agents=1) as ex:
        assert [a.memory for a in ex.agents()] == [1 << 30]
        runs = windows(f.result(60) for f in
                       [ex.options(memory="512M").submit(timed("m", 0.5)) for _ in range(4)])
        plain = windows(f.result(60) for f in [ex.submit(timed("p", 0.5)) for _ in range(4)])
    assert most_at_once([(s, e) for _, s, e in runs]) == 2, runs
    assert most_at_once([(s, e) for _, s, e in plain]) >= 2, plain  # the slots do allow more


def test_an_exclusive_task_runs_alone(head):
    connfile, _, add_agent = head
    add_agent("--slots", "4", "--workers", "0")
    with Executor(connect=str(connfile), min_agents=1) as ex:
        futs = [ex.submit(timed("small", 0.5)) for _ in range(2)]
        futs.append(ex.options(exclusive=True).submit(timed("alone", 0.5)))
        futs += [ex.submit(timed("small", 0.5)) for _ in range(2)]
        runs = windows(f.result(60) for f in futs)
    alone = [r for r in runs if r[0] == "alone"][0]
    small = [r for r in runs if r[0] == "small"]
    assert not any(overlap(alone, s) for s in small), runs
    assert most_at_once([(s, e) for _, s, e in small]) >= 2, runs


def gpu_call(seconds: float) -> tuple[str, float, float]:
    import os

    start = time.time()
    time.sleep(seconds)
    return os.environ.get("CUDA_VISIBLE_DEVICES", ""), start, time.time()


def test_local_default_offers_the_gpus_it_is_told():
    """Executor(gpus=2): its agent offers 2 GPUs; Python calls and commands with gpus=1 each
    see one device, never one a running task holds; gpus=3 fails at once."""
    with Executor(workers=2, slots=2, gpus=2, min_agents=1) as ex:
        assert [a.gpus for a in ex.agents()] == [2]
        r = ex.options(gpus=1).submit(Command('echo "$CUDA_VISIBLE_DEVICES"')).result(30)
        assert r.stdout.strip() in (b"0", b"1")
        runs = [f.result(30) for f in [ex.options(gpus=1).submit(gpu_call, 0.3) for _ in range(4)]]
        assert all(seen in ("0", "1") for seen, _, _ in runs), runs
        for i, a in enumerate(runs):
            for b in runs[i + 1:]:
                assert not (overlap(a, b) and a[0] == b[0]), (a, b)
        assert "asks for 3 gpus" in str(ex.options(gpus=3).submit(Command("true")).exception(30)).lower()
