"""The spawn helper (shoal.agent.spawner): commands start, end, stop and die with the agent.

Driven directly (a Spawner as the agent holds it) and through a local Executor, with real
processes: kill -9 of the agent leaves none of its commands behind, a cancel still kills a
running command's whole process group, and commands start with the signals at their
defaults although the helper catches SIGTERM and SIGINT.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import tempfile
import time

import cloudpickle
import pytest

from shoal import Command, Executor
from shoal.agent import launcher
from shoal.agent.spawner import MAX_MSG, Spawner, wait_child

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests

# every test with the compiled spawn path and with the Python one (conftest.spawn_path)
pytestmark = pytest.mark.usefixtures("spawn_path")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] != b"Z"


def _wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _read_pid(path, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text.endswith("\n") or text.isdigit():
            return int(text)
        time.sleep(0.02)
    raise AssertionError(f"{path} was not written")


class _Driver:
    """A Spawner and the reports it sent, keyed by the key the test gave."""

    def __init__(self) -> None:
        self.sp = Spawner()
        self.sp.config(dict(os.environ), 1 << 20)
        self.reports: dict[int, tuple] = {}

    def until(self, keys: set[int], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not keys <= self.reports.keys():
            assert self.sp.flush()
            assert time.monotonic() < deadline, f"no report for {keys - self.reports.keys()}"
            select.select([self.sp.fileno()], [], [], 0.2)
            for rep in self.sp.receive():
                self.reports[rep[0]] = rep

    def close(self) -> None:
        self.sp.close(5.0)


@pytest.fixture
def drv():
    d = _Driver()
    yield d
    d.close()
    assert _wait_gone([d.sp.pid], 1.0) == []


def test_commands_run_and_report_their_results(drv):
    drv.sp.run(1, 10, {"argv": ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"]}, 1)
    drv.sp.run(2, 11, {"argv": ["/bin/sh", "-c", "/bin/true"]}, 1)
    drv.sp.run(3, 12, {"argv": ["/bin/sh", "-c", "no-such-program-here"]}, 1)
    drv.sp.run(4, 13, {"argv": ["/no/such/program"]}, 1)
    drv.until({1, 2, 3, 4})
    import pickle

    key, rc, started, ended, status, payload, info = drv.reports[1]
    res = pickle.loads(payload)
    assert (rc, res.returncode, res.stdout, res.stderr) == (3, 3, b"out\n", b"err\n")
    assert info["exit"] == 3 and ended >= started > 0
    assert drv.reports[2][1] == 0
    assert drv.reports[3][1] == 127 and b"not found" in pickle.loads(drv.reports[3][5]).stderr
    key, rc, started, ended, status, payload, info = drv.reports[4]
    assert rc is None and "command not found" in payload  # could not start: a message


def test_the_cap_bounds_the_cores_in_use_and_queued_ones_can_be_dropped(drv):
    drv.sp.cap(1)
    for key in (1, 2, 3):
        drv.sp.run(key, key, {"argv": ["/bin/sleep", "0.3"]}, 1)
    drv.sp.kill(3, signal.SIGKILL, "drop")  # still queued behind the other two
    drv.until({1, 2, 3})
    a, b = drv.reports[1], drv.reports[2]
    assert b[2] >= a[3] - 0.01  # one core: the second started when the first ended
    assert drv.reports[3][1] is None and drv.reports[3][5] is None  # dropped, never ran


def test_a_kill_signals_the_whole_process_group(drv, tmp_path):
    bg = tmp_path / "bg"
    drv.sp.run(1, 1, {"argv": ["/bin/sh", "-c", f"sleep 60 & echo $! > {bg}; wait"]}, 1)
    drv.sp.flush()
    child = _read_pid(bg)
    drv.sp.kill(1, signal.SIGTERM, "timeout")
    drv.until({1})
    rep = drv.reports[1]
    assert rep[1] == -signal.SIGTERM and rep[4] is None  # its output was not wanted
    assert _wait_gone([child]) == []


def test_big_messages_travel_both_ways(drv):
    big = "x" * (2 * MAX_MSG)
    drv.sp.run(1, 1, {"argv": ["/bin/sh", "-c", 'printf %s "$BIG"'], "env": {"BIG": big}}, 1)
    drv.until({1})
    import pickle

    assert pickle.loads(drv.reports[1][5]).stdout == big.encode()


def test_commands_start_with_the_signals_of_a_spawn_from_the_agent_itself(drv):
    # the helper catches SIGTERM, SIGINT, SIGQUIT, SIGUSR1 and SIGHUP; a command must not
    # start with them ignored: the same mask as launcher.spawn from this process gives
    def ignored(out: bytes) -> str:
        return next(x for x in out.decode().splitlines() if x.startswith("SigIgn:"))

    import pickle

    argv = ["/bin/cat", "/proc/self/status"]
    here = launcher.spawn(1, {"argv": argv}, 1, dict(os.environ))
    assert _wait_gone([here.pid]) == [] and launcher.reap(here)
    want = ignored(pickle.loads(launcher.outcome(here)[1]).stdout)
    drv.sp.run(1, 1, {"argv": argv}, 1)
    drv.until({1})
    assert ignored(pickle.loads(drv.reports[1][5]).stdout) == want


def test_the_helper_stops_its_commands_when_the_agent_end_closes(tmp_path):
    d = _Driver()
    bg = tmp_path / "bg"
    d.sp.run(1, 1, {"argv": ["/bin/sh", "-c", f"sleep 60 & echo $! > {bg}; exec sleep 60"]}, 1)
    d.sp.flush()
    child = _read_pid(bg)
    d.sp.close(5.0)
    assert _wait_gone([child, d.sp.pid], 1.0) == []


def _agent_dirs() -> set[str]:
    tmp = tempfile.gettempdir()
    return {os.path.join(tmp, n) for n in os.listdir(tmp) if n.startswith("shoal-agent-")}


@pytest.mark.parametrize("whole_group", [False, True])
def test_kill_9_of_the_agent_leaves_no_command_behind(tmp_path, whole_group):
    fg, bg = tmp_path / "fg", tmp_path / "bg"
    before = _agent_dirs()
    with Executor(workers=1) as ex:
        f = ex.submit(Command(f"echo $$ > {fg}; sleep 60 & echo $! > {bg}; wait"))
        leader, child = _read_pid(fg), _read_pid(bg)
        agent = ex.agents()[0].pid
        assert _ppid(_ppid(leader)) == agent  # the helper's child
        helpers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == agent]
        if whole_group:  # the agent and its workers, as a batch system's kill of a step
            os.killpg(os.getpgid(agent), signal.SIGKILL)
        else:
            os.kill(agent, signal.SIGKILL)
        assert _wait_gone([leader, child, *helpers]) == [], "left behind by kill -9 of the agent"
        # nor its temporary directory (the workers' socket): the helper removes it
        assert not (_agent_dirs() - before), "the agent's directory is left in /tmp"
        f.cancel()


def test_cancel_of_a_running_command_kills_its_process_group(tmp_path):
    bg = tmp_path / "bg"
    with Executor(workers=1) as ex:
        f = ex.submit(Command(f"sleep 60 & echo $! > {bg}; wait"))
        child = _read_pid(bg)
        assert f.cancel(running=True)
        assert _wait_gone([child]) == []


def test_a_command_handed_ahead_starts_when_python_tasks_free_the_cores(tmp_path):
    """Regression: short commands make the agent hand the next ones to the helper ahead of
    free cores; one handed while both cores ran Python tasks waited for ever, because the
    helper's cap was updated only while commands were queued in the agent."""
    go = tmp_path / "go"
    with Executor(workers=2) as ex:
        for _ in range(3):  # short commands: the agent learns they are short
            assert all(f.result(timeout=60).returncode == 0
                       for f in [ex.submit(Command(["true"])) for _ in range(20)])
        holds = [ex.submit(_hold, str(go)) for _ in range(2)]
        deadline = time.monotonic() + 60
        while not all(f.running() for f in holds) and time.monotonic() < deadline:
            time.sleep(0.01)
        cmd = ex.submit(Command(["true"]))
        time.sleep(0.3)  # handed to the helper while no core is free
        go.write_text("")
        assert [f.result(timeout=60) for f in holds] == [True, True]
        assert cmd.result(timeout=10).returncode == 0


def _hold(path: str) -> bool:
    while not os.path.exists(path):
        time.sleep(0.01)
    return True


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return -1
    return int(stat[stat.rfind(b")") + 2:].split()[1])


def test_wait_child_reaps_a_child_the_moment_it_exits():
    # what the agent's stop waits on (its spawn helper, its workers): a pidfd, not a poll
    pid = os.posix_spawn("/bin/sleep", ["sleep", "0.3"], os.environ)
    t = time.monotonic()
    assert wait_child(pid, 10.0)
    assert 0.25 <= time.monotonic() - t < 5.0
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(pid, os.WNOHANG)
    assert wait_child(pid, 1.0)  # reaped already: nothing to wait for


def test_wait_child_gives_up_at_the_timeout_and_leaves_the_child_running():
    pid = os.posix_spawn("/bin/sleep", ["sleep", "30"], os.environ)
    try:
        assert not wait_child(pid, 0.2)
        assert _alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_the_helper_exits_and_is_reaped_when_the_agent_closes_it():
    sp = Spawner()
    sp.close(5.0)
    with pytest.raises(ChildProcessError):
        os.waitpid(sp.pid, os.WNOHANG)


def test_commands_read_dev_null_and_see_the_configured_environment(drv):
    # The helper's own stdin is /dev/null (read-only) and every command inherits it; its
    # environment goes to posix_spawn as bytes, remembered per config.
    import pickle

    def stdin_of(key: int) -> tuple[bytes, int]:
        res = pickle.loads(drv.reports[key][5])
        link, flags = res.stdout.split(b"\n")[:2]
        return link, int(flags.split()[1], 8) & os.O_ACCMODE

    show = ["/bin/sh", "-c", "readlink /proc/self/fd/0; grep ^flags /proc/self/fdinfo/0; cat"]
    drv.sp.run(1, 1, {"argv": show}, 1)
    drv.sp.run(2, 2, {"argv": show, "stdout": "capture", "check": False}, 1)
    drv.sp.run(3, 3, {"argv": show, "env": {"X": "1"}}, 1)
    drv.until({1, 2, 3})
    for key in (1, 2, 3):
        assert stdin_of(key) == (b"/dev/null", os.O_RDONLY)
    value = os.fsdecode(b"\xe9\xff")
    for n, env_value in enumerate((value, "second")):
        drv.sp.config(dict(os.environ, SHOAL_T=env_value), 1 << 20)
        drv.sp.run(10 + n, 10 + n, {"argv": ["/usr/bin/env"]}, 1)
        drv.sp.run(20 + n, 20 + n, {"argv": ["/bin/sh", "-c", "env"]}, 1)
        drv.until({10 + n, 20 + n})
        for key in (10 + n, 20 + n):
            lines = pickle.loads(drv.reports[key][5]).stdout.split(b"\n")
            assert b"SHOAL_T=" + os.fsencode(env_value) in lines


def test_a_stream_of_short_commands_is_reported_in_full(drv):
    # SIGCHLD reaches the helper's loop through a flag and an exception out of its poll:
    # no exit may be missed, whenever it comes
    import pickle

    drv.sp.cap(2)
    keys = set(range(1, 301))
    for key in keys:
        argv = ["/bin/true"] if key % 3 else ["/bin/sh", "-c", f"exit {key % 7}"]
        drv.sp.run(key, key, {"argv": argv}, 1)
    drv.until(keys, timeout=60)
    for key in keys:
        rc = 0 if key % 3 else key % 7
        res = pickle.loads(drv.reports[key][5])
        assert drv.reports[key][1] == rc and (res.returncode, res.stdout, res.stderr) == (rc, b"", b"")
