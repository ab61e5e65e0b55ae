"""The spawn helper's compiled per-command path (shoal.agent._spawnc) and its Python
fallback start the same commands, the same way, with the same errors (issue 13).

Each test runs with both paths (conftest.spawn_path); the last ones compare the two."""

from __future__ import annotations

import os
import pickle
import signal
import time

import pytest

from shoal.agent import launcher
from shoal.task.command import CommandResult
from shoal.transport import protocol as P

pytestmark = pytest.mark.usefixtures("spawn_path")

ENV = dict(os.environ)


def _fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def _finish(run: launcher.Running, timeout: float = 10.0) -> tuple[int, bytes, dict | None]:
    """Wait for the command, reap it as the helper does (compiled or not), its outcome."""
    os.waitid(os.P_PID, run.pid, os.WEXITED | os.WNOWAIT)
    if launcher._c is not None:
        got = dict(launcher._c.reap())
        run.status = got[run.pid]
    else:
        assert launcher.reap(run)
    return launcher.outcome(run)


def _result(spec: dict, env: dict | None = None) -> CommandResult:
    status, payload, _info = _finish(launcher.spawn(1, spec, 1, env or ENV))
    assert status == P.OK
    return pickle.loads(payload)


def test_the_path_in_use_is_the_one_asked_for(spawn_path):
    assert (launcher._c is not None) == (spawn_path == "compiled")


@pytest.mark.parametrize("argv", [["/bin/sh", "-c", "echo out; echo err >&2; exit 3"],
                                  ["/bin/sh", "-c", "printf 'a b\\n'; printf x >&2"]])
def test_a_command_writes_to_stdout_and_stderr(argv):
    res = _result({"argv": argv})
    if "exit 3" in argv[2]:
        assert (res.returncode, res.stdout, res.stderr) == (3, b"out\n", b"err\n")
        assert res.args == argv[2]
    else:
        assert (res.returncode, res.stdout, res.stderr) == (0, b"a b\n", b"x")


def test_discarded_streams_and_the_plain_modes():
    res = _result({"argv": ["/bin/sh", "-c", "echo out; echo err >&2"], "stdout": "devnull",
                   "stderr": "capture"})
    assert (res.stdout, res.stderr) == (None, b"err\n")
    res = _result({"argv": ["/bin/echo", "hi"], "stdout": "capture", "stderr": "devnull"})
    assert (res.stdout, res.stderr) == (b"hi\n", None)


@pytest.mark.parametrize("code", [0, 1, 2, 127, 255])
def test_exit_codes(code):
    assert _result({"argv": ["/bin/sh", "-c", f"exit {code}"]}).returncode == code


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGPIPE])
def test_a_command_killed_by_a_signal(sig):
    res = _result({"argv": ["/bin/sh", "-c", f"kill -{int(sig)} $$"]})
    assert res.returncode == -sig


def test_a_command_gets_a_session_its_stdin_and_no_descriptor_of_ours():
    script = ("ps -o sid= -o pgid= -p $$; readlink /proc/self/fd/0; "
              "echo $(ls /proc/self/fd)")
    other = launcher.spawn(2, {"argv": ["/bin/sleep", "0.2"]}, 1, ENV)  # holds 2 memfds
    run = launcher.spawn(1, {"argv": ["/bin/sh", "-c", script]}, 1, ENV)
    pid = run.pid
    res = pickle.loads(_finish(run)[1])
    _finish(other)
    sid, pgid = res.stdout.split(b"\n")[0].split()
    assert int(sid) == int(pgid) == pid
    assert res.stdout.split(b"\n")[1] == b"/dev/null"
    # 0, 1, 2, what this process lets every child inherit (the test harness's) and ls's
    # own directory: none of the captures of other commands (close-on-exec)
    ours = {0, 1, 2} | {fd for fd in _fds() if _inheritable(fd)}
    assert len({int(n) for n in res.stdout.split(b"\n")[2].split()} - ours) == 1


def _inheritable(fd: int) -> bool:
    try:
        return os.get_inheritable(fd)
    except OSError:
        return False


def test_caught_and_python_ignored_signals_are_at_their_defaults_in_the_command():
    caught = signal.signal(signal.SIGUSR1, lambda *_: None)
    ignored = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        res = _result({"argv": ["/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]})
    finally:
        signal.signal(signal.SIGUSR1, caught)
        signal.signal(signal.SIGUSR2, ignored)
    fields = dict(line.split(b":\t") for line in res.stdout.splitlines())
    ign = int(fields[b"SigIgn"], 16)
    assert int(fields[b"SigBlk"], 16) == 0  # the parent's mask, restored
    for sig in (signal.SIGUSR1, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM):
        assert not ign & (1 << (sig - 1)), sig
    assert ign & (1 << (signal.SIGUSR2 - 1))  # one ignored on purpose stays ignored


def test_a_missing_program(tmp_path):
    before = _fds()
    for argv, what in ((["no-such-program-xyz"], "no-such-program-xyz"),
                       ([str(tmp_path / "nope")], str(tmp_path / "nope"))):
        with pytest.raises(launcher.LaunchError) as err:
            launcher.spawn(1, {"argv": argv}, 1, ENV)
        assert str(err.value) == f"command not found: {what!r}"
    assert _fds() == before  # the captures of what did not start are closed


def test_a_program_that_cannot_be_executed(tmp_path):
    prog = tmp_path / "prog"
    prog.write_text("#!/bin/sh\necho hi\n")
    before = _fds()
    for argv in ([str(prog)], [str(tmp_path)]):
        with pytest.raises(launcher.LaunchError) as err:
            launcher.spawn(1, {"argv": argv}, 1, ENV)
        assert str(err.value) == f"permission denied: cannot execute {argv[0]!r}"
    assert _fds() == before


def test_a_shell_line_whose_program_is_missing_or_not_executable_goes_to_the_shell(tmp_path):
    prog = tmp_path / "prog"
    prog.write_text("echo from a script without a shebang\n")
    res = _result({"argv": ["/bin/sh", "-c", "no-such-program-xyz a b"]})
    assert res.returncode == 127 and b"not found" in res.stderr
    prog.chmod(0o644)
    res = _result({"argv": ["/bin/sh", "-c", str(prog)]})
    assert res.returncode == 126 and b"ermission denied" in res.stderr
    prog.chmod(0o755)  # no #!: the shell runs it (ENOEXEC)
    res = _result({"argv": ["/bin/sh", "-c", str(prog)]})
    assert (res.returncode, res.stdout) == (0, b"from a script without a shebang\n")


def test_a_line_over_the_kernel_limit_is_a_launch_error():
    with pytest.raises(launcher.LaunchError, match="too long to run"):
        launcher.spawn(1, {"argv": ["/bin/echo", "x" * (200 << 10)]}, 1, ENV)


def test_the_environment_the_command_sees(tmp_path):
    env = dict(ENV, SHOAL_T=os.fsdecode(b"\xe9\xff"), PATH=f"{tmp_path}:/usr/bin:/bin")
    (tmp_path / "here-only").write_text("#!/bin/sh\necho \"found $SHOAL_T\"\n")
    (tmp_path / "here-only").chmod(0o755)
    res = _result({"argv": ["/bin/sh", "-c", "here-only"]}, env)  # direct: PATH of env
    assert res.stdout == b"found \xe9\xff\n"
    res = _result({"argv": ["/usr/bin/env"]}, env)
    assert b"SHOAL_T=\xe9\xff" in res.stdout.split(b"\n")


def test_many_commands_at_once_are_all_reaped():
    runs = [launcher.spawn(i, {"argv": ["/bin/sh", "-c", f"exit {i % 5}"]}, 1, ENV)
            for i in range(40)]
    by_pid = {r.pid: r for r in runs}
    deadline = time.monotonic() + 20
    done: dict[int, int] = {}
    while len(done) < len(runs):
        assert time.monotonic() < deadline
        time.sleep(0.01)
        if launcher._c is not None:
            done.update(launcher._c.reap())
        else:
            for r in runs:
                if r.pid not in done and launcher.reap(r):
                    done[r.pid] = r.status
    for pid, code in done.items():
        run = by_pid[pid]
        run.status = code
        assert code == run.tid % 5
        launcher.release(run)


def test_both_paths_give_the_same_result_bytes():
    if launcher._spawnc is None:
        pytest.skip("shoal.agent._spawnc is not built")
    specs = [{"argv": ["/bin/true"]}, {"argv": ["/bin/sh", "-c", "/bin/true"]},
             {"argv": ["/bin/sh", "-c", "printf 'o\\n'; printf e >&2; exit 4"]},
             {"argv": ["/bin/sh", "-c", "true"], "stdout": "devnull", "stderr": "devnull"},
             {"argv": ["/bin/sh", "-c", "env"]}, {"argv": ["/usr/bin/env"]},
             {"argv": ["/bin/sh", "-c", "ls /proc/self/fd"]}]
    got: dict[bool, list] = {}
    try:
        for on in (True, False):
            launcher.use_compiled(on)
            got[on] = []
            for spec in specs:
                run = launcher.spawn(1, spec, 1, ENV)
                status, payload, info = _finish(run)
                got[on].append((status, info, _no_duration(pickle.loads(payload))))
    finally:
        launcher.use_compiled()
    assert got[True] == got[False]


def _no_duration(res: CommandResult) -> tuple:
    return (res.returncode, res.stdout, res.stderr, res.args)


def test_env_checks_as_posix_spawn_does():
    if launcher._spawnc is None:
        pytest.skip("shoal.agent._spawnc is not built")
    Env = launcher._spawnc.Env
    for bad in ({"A=B": "1"}, {"": "1"}):
        with pytest.raises(ValueError):
            Env(bad)
    with pytest.raises(ValueError):
        Env({"A": "1\0"})
    with pytest.raises(TypeError):
        Env([("A", "1")])
    Env({})


def test_the_snapshot_of_signals_lists_the_caught_ones_and_pipe_and_xfsz():
    if launcher._spawnc is None:
        pytest.skip("shoal.agent._spawnc is not built")
    c = launcher._spawnc
    caught = signal.signal(signal.SIGUSR1, lambda *_: None)
    ignored = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        listed = set(c.snapshot_signals())
        assert {signal.SIGUSR1, signal.SIGPIPE, signal.SIGXFSZ} <= listed
        assert signal.SIGUSR2 not in listed and signal.SIGKILL not in listed
        # with the snapshot, a command starts as it does without one
        res = _result({"argv": ["/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]})
        fields = dict(line.split(b":\t") for line in res.stdout.splitlines())
        ign = int(fields[b"SigIgn"], 16)
        assert int(fields[b"SigBlk"], 16) == 0
        assert not ign & (1 << (signal.SIGUSR1 - 1)) and not ign & (1 << (signal.SIGPIPE - 1))
        assert ign & (1 << (signal.SIGUSR2 - 1))
    finally:
        assert c.snapshot_signals(False) == []  # each child reads them all again
        signal.signal(signal.SIGUSR1, caught)
        signal.signal(signal.SIGUSR2, ignored)
