"""Task resources through the API: ``ex.options(gpus=, memory=, ranks=, nodes=, exclusive=)``,
``Executor(gpus=, min_agents=)``, ``ex.wait_for_agents`` (docs/resources.md)."""

from __future__ import annotations

import sys
import time

import pytest

from shoal import Command, Executor
from shoal.client import options as O


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
    with pytest.raises(ValueError, match=r"gpus= and memory= describe the local agent: with "
                                         r"connect=, give them to each `shoal agent`"):
        Executor(connect=str(tmp_path / "run.json"), gpus=2)


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
