"""A one-command shell line runs without /bin/sh (shoal.agent.spawnline), and everything
the shell would have said or done stays the same."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

from shoal.agent import launcher
from shoal.agent.spawnline import direct_argv


def sh(line: str) -> list[str]:
    return ["/bin/sh", "-c", line]


@pytest.mark.parametrize("line, words", [
    ("/bin/true", ["/bin/true"]),
    ("sleep 0.953", ["sleep", "0.953"]),
    ("  gzip -9 -c in.txt  ", ["gzip", "-9", "-c", "in.txt"]),
    ("dd if=a of=b bs=1M", ["dd", "if=a", "of=b", "bs=1M"]),
    ("/bin/echo -e x", ["/bin/echo", "-e", "x"]),   # a path: never the shell's builtin
])
def test_plain_lines_are_split_like_the_shell(line, words):
    assert direct_argv(sh(line)) == words


@pytest.mark.parametrize("line", [
    "echo hi",            # builtin: dash's echo is not /bin/echo
    "true", "cd /tmp", "exit 3", "test -f x", "kill 1", "printf x",
    "A=1 env",            # an assignment
    "ls *.txt", "ls ~", "echo $HOME", "a; b", "a && b", "a | b", "a > f", "a 'b c'",
    'a "b"', "a # comment", "a\nb", "a\\ b", "if true", "for x", "(a)", "{ a; }", "!a",
    "`a`", "",
])
def test_lines_the_shell_must_read_go_to_the_shell(line):
    assert direct_argv(sh(line)) is None


def test_only_sh_dash_c_lines_are_considered():
    assert direct_argv(["/bin/true"]) is None
    assert direct_argv(["/bin/bash", "-c", "true"]) is None
    assert direct_argv(["/bin/sh", "-e", "true"]) is None


def _finish(run: launcher.Running, timeout: float = 10.0) -> tuple[int, bytes, bytes]:
    ep = select.epoll()
    pidfd = os.pidfd_open(run.pid)
    ep.register(pidfd, select.EPOLLIN)
    try:
        deadline = time.monotonic() + timeout
        while not ep.poll(0.5):  # the pidfd says it exited (reap() kills what is left)
            assert time.monotonic() < deadline, "command did not exit"
        assert launcher.reap(run)
    finally:
        ep.close()
        os.close(pidfd)
    out = launcher._read_capture(run.captures.pop("stdout"))
    err = launcher._read_capture(run.captures.pop("stderr"))
    return run.status, out, err


def _spawn(line: str, env: dict[str, str] | None = None) -> launcher.Running:
    return launcher.spawn(1, {"argv": sh(line)}, 1, env if env is not None else dict(os.environ))


def test_a_plain_line_is_the_task_process_itself():
    # no shell in between: the process the agent started is the program
    run = _spawn(f"{sys.executable} -c pass")
    exe = os.readlink(f"/proc/{run.pid}/exe")
    assert os.path.realpath(exe) == os.path.realpath(sys.executable)
    rc, _, _ = _finish(run)
    assert rc == 0


def test_a_killed_plain_command_reports_its_signal():
    run = _spawn("sleep 30")
    os.kill(run.pid, signal.SIGKILL)
    rc, _, _ = _finish(run)
    assert rc == -signal.SIGKILL


def test_not_found_is_the_shells_message_and_status():
    rc, out, err = _finish(_spawn("no-such-program-xyz arg"))
    assert rc == 127
    assert b"not found" in err


def test_not_executable_is_the_shells_message_and_status(tmp_path):
    script = tmp_path / "noexec"
    script.write_text("echo should-not-run\n")
    rc, out, err = _finish(_spawn(str(script)))
    assert rc == 126
    assert b"ermission denied" in err and not out


def test_a_script_without_shebang_is_run_by_the_shell(tmp_path):
    script = tmp_path / "plain"
    script.write_text("echo from-script $0\n")
    script.chmod(0o755)
    rc, out, err = _finish(_spawn(str(script)))
    assert (rc, out.strip()) == (0, f"from-script {script}".encode()), err


def test_pwd_is_the_one_the_shell_would_export(tmp_path):
    env = dict(os.environ)
    env["PWD"] = str(tmp_path)  # not the working directory: dash exports the real one
    rc, out, _ = _finish(_spawn("printenv PWD", env))
    assert rc == 0 and out.strip() == os.getcwd().encode()
    want = subprocess.run(["/bin/sh", "-c", "printenv PWD"], env=env, capture_output=True).stdout
    assert out == want


def test_path_lookup_uses_the_commands_environment(tmp_path):
    prog = tmp_path / "my-tool"
    prog.write_text("#!/bin/sh\necho tool:$1\n")
    prog.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ.get('PATH', '')}")
    rc, out, _ = _finish(_spawn("my-tool x", env))
    assert (rc, out) == (0, b"tool:x\n")


def test_shoal_run_output_and_statuses_match_the_shell(tmp_path):
    (tmp_path / "tasks.txt").write_text(
        "echo builtin\n/bin/echo plain\nprintenv PWD\nno-such-program-xyz\nls /no/such/dir\n")
    res = subprocess.run([sys.executable, "-m", "shoal", "run", "-j", "2", "--no-progress",
                          "tasks.txt"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert sorted(lines) == sorted(["builtin", "plain", os.path.realpath(tmp_path)])
    assert "exit status 127" in res.stderr and "exit status 2" in res.stderr


def _ignored(status: bytes) -> int:
    for line in status.splitlines():
        if line.startswith(b"SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigIgn line")


@pytest.mark.parametrize("line", ["cat /proc/self/status", "cat /proc/self/status; true"])
def test_commands_start_with_sigpipe_at_its_default(line):
    # Python ignores SIGPIPE and SIGXFSZ; with or without a shell the command must not
    rc, out, _ = _finish(_spawn(line))
    assert rc == 0
    ignored = _ignored(out)
    assert not ignored & (1 << (signal.SIGPIPE - 1)), hex(ignored)
    assert not ignored & (1 << (signal.SIGXFSZ - 1)), hex(ignored)


def test_a_pipeline_ends_quietly_when_its_reader_stops():
    rc, out, err = _finish(_spawn("yes | head -1"))
    assert (rc, out, err) == (0, b"y\n", b"")
