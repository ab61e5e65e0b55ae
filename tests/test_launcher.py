"""shoal.agent.launcher's short cuts give what the long way gives (issue 13: the spawn
helper's CPU per command): a command's result pickle made from a template, and the read
of its captured output."""

from __future__ import annotations

import math
import os
import pickle
import time

import pytest

from shoal.agent import launcher, limits
from shoal.task.command import CommandResult
from shoal.transport import protocol as P

SHOWN = [["/bin/true"], "sleep 1", ["printf", "%s\\n", "a b"], ["a", "a"], [], ("a", "b"),
         ["a", "b"], ["1"], [1], [1.0], [True]]
STREAMS = [(b"", b""), (None, None), (b"", None), (None, b""), (b"out\n", b""), (b"", b"err")]
DURATIONS = [0.0, 1e-9, 0.000512, 1.5, 123456.789, -0.0, math.inf, 7e-310]

# every test with the compiled spawn path and with the Python one (conftest.spawn_path)
pytestmark = pytest.mark.usefixtures("spawn_path")


@pytest.mark.parametrize("shown", SHOWN)
@pytest.mark.parametrize("streams", STREAMS)
def test_a_result_pickle_is_the_pickle_of_the_result(shown, streams):
    out, err = streams
    for rc in (0, 1, -9):
        for d in DURATIONS:
            want = pickle.dumps(CommandResult(rc, out, err, shown, d), protocol=5)
            assert launcher._pickled_result(rc, out, err, shown, d) == want
            assert pickle.loads(want) == CommandResult(rc, out, err, shown, d)


def test_a_result_pickle_with_a_nan_duration():
    got = pickle.loads(launcher._pickled_result(0, b"", b"", ["x"], math.nan))
    assert got.returncode == 0 and math.isnan(got.duration)


def _memfd(data: bytes = b"") -> int:
    fd = os.memfd_create("t", os.MFD_CLOEXEC)
    if data:
        os.write(fd, data)
    return fd


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_read_capture_of_what_was_written():
    for data in (b"", b"x", b"line\n" * 1000):
        fd = _memfd(data)
        assert launcher._read_capture(fd, None) == data
        assert _closed(fd)


def test_read_capture_after_the_command_moved_its_offset_back():
    fd = _memfd(b"abcdef")
    os.lseek(fd, 0, os.SEEK_SET)  # the size counts, not the offset
    assert launcher._read_capture(fd, 100) == b"abcdef"


def test_read_capture_of_a_trimmed_file_names_what_was_written():
    fd = _memfd(b"0123456789" * 10)
    os.ftruncate(fd, 20)  # trim_captures: the offset (100) stays, the file is 20 bytes
    got = launcher._read_capture(fd, 20)
    assert got == b"01234567890123456789\n" + limits.truncation_marker(20, 100)


def test_read_capture_over_the_cap():
    fd = _memfd(b"y" * 50)
    assert launcher._read_capture(fd, 10) == b"y" * 10 + b"\n" + limits.truncation_marker(10, 50)


def _finished(out: bytes | None, err: bytes | None, rc: int = 0, spec: dict | None = None,
              move: bool = False) -> launcher.Running:
    captures = {}
    for name, data in (("stdout", out), ("stderr", err)):
        if data is not None:
            fd = captures[name] = _memfd(data)
            if move:
                os.lseek(fd, 0, os.SEEK_SET)
    run = launcher.Running(1, 0, -1, spec or {"argv": ["/bin/true"]}, 1, time.monotonic() - 0.5,
                           captures)
    run.status = rc
    return run


@pytest.mark.parametrize("out,err", [(b"", b""), (b"o", b""), (b"", b"e"), (b"o\n", b"e\n"),
                                     (None, b""), (None, None)])
@pytest.mark.parametrize("move", [False, True])
def test_outcome_reads_both_streams_and_closes_them(out, err, move):
    run = _finished(out, err, move=move)
    fds = list(run.captures.values())
    now = time.monotonic()
    status, payload, info = launcher.outcome(run, now)
    res = pickle.loads(payload)
    assert (status, info) == (P.OK, None)
    assert (res.returncode, res.stdout, res.stderr, res.args) == (0, out, err, ["/bin/true"])
    assert res.duration == pytest.approx(0.5, abs=0.2)
    assert run.captures == {} and all(_closed(fd) for fd in fds)


def test_outcome_of_a_failed_command():
    status, payload, info = launcher.outcome(_finished(b"", b"", rc=3), time.monotonic())
    assert status == P.OK and info == {"why": "exit status 3", "exit": 3}
    assert pickle.loads(payload).returncode == 3
    run = _finished(b"", b"bad\n", rc=3, spec={"argv": ["/bin/sh", "-c", "x"], "check": True})
    status, payload, info = launcher.outcome(run, time.monotonic())
    assert status == P.ERR and info is not None


def test_the_short_path_and_the_long_one_start_the_same_command(tmp_path):
    env = dict(os.environ, SHOAL_T=os.fsdecode(b"\xe9\xff"))
    argv = ["/bin/sh", "-c", "cat /proc/self/environ; readlink /proc/self/fd/0 >&2"]
    got = []
    for spec in ({"argv": argv}, {"argv": argv, "env": {"SHOAL_U": "1"}}):
        run = launcher.spawn(1, spec, 1, env)
        os.waitid(os.P_PID, run.pid, os.WEXITED | os.WNOWAIT)  # exited: reap() kills first
        assert launcher.reap(run)
        got.append(pickle.loads(launcher.outcome(run)[1]))
    short, long_ = got
    assert short.stderr == long_.stderr == b"/dev/null\n"
    assert b"SHOAL_T=\xe9\xff\0" in short.stdout
    assert sorted(short.stdout.split(b"\0") + [b"SHOAL_U=1"]) == sorted(long_.stdout.split(b"\0"))
