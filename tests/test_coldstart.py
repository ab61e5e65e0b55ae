"""Cold start of the local default: what the client imports before it starts its runtime,
the starter that forks the head and the agent (shoal.launch.boot), and what stopping
leaves behind (nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import zmq

from shoal import Executor
from shoal.task.errors import ExecutorError
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection
from shoal.transport.session import PeerSession
from tests.conftest import wait_gone

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode()


def _gone(pid: int) -> bool:
    """Exited (a zombie counts as exited: only reaping is left)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except FileNotFoundError:
        return []


def test_the_executor_class_loads_no_transport_before_it_starts_a_runtime():
    # Executor() starts the head and the agent first and imports these while they start
    code = ("import sys\nfrom shoal import Executor, Command\n"
            "print(sorted(m for m in ('zmq', 'cloudpickle', 'msgpack', 'multiprocessing') "
            "if m in sys.modules))")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT}).stdout
    assert out.strip() == "[]"


def test_one_starter_forks_the_head_and_the_agent_and_all_are_gone_after_shutdown():
    ex = Executor(workers=1)
    cluster = ex._cluster
    starter = cluster._starter
    try:
        assert ex.submit(abs, -5).result(timeout=60) == 5
        head, agent = cluster.head.pid, cluster.agent.pid
        workers = _children(agent)
        assert sorted(_children(starter.proc.pid)) == sorted([head, agent])
        # each shows what it is, as `python -m shoal.head` / `-m shoal.agent` would
        assert " -m shoal.head --connection " in _cmdline(head)
        assert " -m shoal.agent --connection " in _cmdline(agent)
        assert os.getsid(head) == head and os.getsid(agent) == agent  # own sessions
        assert workers and all(" -m shoal.agent " in _cmdline(w) for w in workers)
    finally:
        ex.shutdown()
    # shutdown() returns once the head, the agent and the starter have exited
    assert all(_gone(p) for p in (head, agent, starter.proc.pid))
    assert cluster.head.returncode == 0 and cluster.agent.returncode == 0
    assert not wait_gone(set(workers), 10.0), "the agent's workers were left behind"
    assert not os.path.exists(cluster.rundir)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_executor_shut_down_at_once_leaves_no_process(workers):
    ex = Executor(workers=workers)
    cluster = ex._cluster
    ex.shutdown()  # the agent may not have joined yet: it is stopped all the same
    pids = {cluster.head.pid, cluster.agent.pid, cluster._starter.proc.pid}
    assert all(_gone(p) for p in pids), "shutdown() returned before its processes exited"
    assert not os.path.exists(cluster.rundir)


def test_a_killed_starter_fails_the_executor_and_leaves_nothing():
    ex = Executor(workers=1)
    cluster = ex._cluster
    try:
        assert ex.submit(abs, -1).result(timeout=60) == 1
        procs = {cluster.head.pid, cluster.agent.pid, *_children(cluster.agent.pid)}
        f = ex.submit(time.sleep, 60)
        # the head, stopped, cannot tell the client it shuts down (the starter's death
        # sends it SIGTERM): the client learns of it from the starter's pipe alone
        os.kill(cluster.head.pid, signal.SIGSTOP)
        os.kill(cluster._starter.proc.pid, signal.SIGKILL)
        with pytest.raises(ExecutorError, match=r"local runtime stopped: its starter .* SIGKILL"):
            f.result(timeout=30)
        with pytest.raises(ExecutorError):
            ex.submit(abs, 2)
    finally:
        ex.shutdown()
    assert not wait_gone(procs, 15.0), "processes of the local runtime were left behind"


def test_an_agent_with_a_workdir_of_its_own_is_started_apart(tmp_path):
    # its environment must be the one its interpreter starts with: no shared starter
    with Executor(workers=1, workdir=tmp_path) as ex:
        assert ex._cluster._starter is None
        assert ex.submit(os.getcwd).result(timeout=60) == str(tmp_path)


def test_the_client_that_asks_for_shutdown_gets_no_shutdown_back(tmp_path):
    """A message left for a client that has closed holds the head's exit for its socket's
    linger (1 s): the head tells every other peer, not the one that asked."""
    conn = Connection.new(f"ipc://{tmp_path}/head")
    path = str(tmp_path / "run.json")
    conn.write(path)
    head = subprocess.Popen([PY, "-m", "shoal.head", "--connection", path, "--quiet"],
                            env={**os.environ, "PYTHONPATH": ROOT})
    ctx = zmq.Context()
    socks = []
    try:
        sessions = []
        for _ in range(2):
            s = ctx.socket(zmq.DEALER)
            s.connect(conn.address)
            sess = PeerSession(conn.key)
            s.send_multipart(sess.encode([P.HELLO, "client", {"pid": os.getpid()}]))
            assert s.poll(30000), "no WELCOME"
            assert sess.decode(*s.recv_multipart())[0] == P.WELCOME
            socks.append(s)
            sessions.append(sess)
        socks[0].send_multipart(sessions[0].encode([P.SHUTDOWN]))
        head.wait(30)

        def kinds(i: int) -> list[int]:
            got = []
            while socks[i].poll(200):
                got.append(sessions[i].decode(*socks[i].recv_multipart())[0])
            return got

        assert P.SHUTDOWN in kinds(1)
        assert P.SHUTDOWN not in kinds(0)
    finally:
        for s in socks:
            s.close(0)
        ctx.term()
        if head.poll() is None:
            head.kill()
            head.wait()


def test_a_runtime_aborted_as_it_starts_leaves_nothing():
    # e.g. the client's imports failed, or Ctrl-C, right after the starter was started: it
    # may not have said yet which processes are the head and the agent
    from shoal.launch.local import LocalCluster

    cluster = LocalCluster(workers=1)
    cluster.abort()
    pids = {cluster.head.pid, cluster.agent.pid, cluster._starter.proc.pid}
    assert all(pids) and all(_gone(p) for p in pids)
    cluster.stop()
    assert not os.path.exists(cluster.rundir)


# ---- the starter forked from the client (shoal.launch.boot.fork_starter) -----------------

_CLIENT = """
import os, sys, threading, time
from shoal import Executor
if sys.argv[1:] == ["thread"]:  # a second thread: the client may not fork
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
r, w = os.pipe()  # the write end must not reach the runtime
sys.stdout.write("unflushed ")  # in the client's buffer (a pipe: not line-buffered) at the fork
ex = Executor(workers=1)
assert ex.submit(abs, -3).result(timeout=60) == 3
from shoal import Command  # the environment reaches commands whole (see set_cmdline)
env = ex.submit(Command(["env", "-0"])).result(timeout=60).stdout.split(b"\\0")[:-1]
assert sorted(env) == sorted(os.fsencode(f"{k}={v}") for k, v in os.environ.items()), env
c = ex._cluster
print(type(c._starter.proc).__name__, c._starter.proc.pid, c.head.pid, c.agent.pid, r, w)
sys.stdout.flush()
os.close(w)
os.set_blocking(r, False)
try:
    print("pipe", os.read(r, 1) == b"")  # EOF: nobody else holds the write end
except BlockingIOError:
    print("pipe held")
sys.stdout.flush()
sys.stdin.readline()  # the test looks at the processes now
ex.shutdown()
"""


def _start_client(tmp_path, *args: str, env: dict[str, str] | None = None,
                  ) -> tuple[subprocess.Popen[str], list[str]]:
    prog = tmp_path / "c.py"  # a short command line: the runtime's must not be cut to it
    prog.write_text(_CLIENT)
    p = subprocess.Popen([PY, "c.py", *args], cwd=tmp_path, text=True, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})
    first = p.stdout.readline().split()  # type: ignore[union-attr]
    second = p.stdout.readline().split()  # type: ignore[union-attr]
    return p, first + second


def _finish(p: subprocess.Popen[str]) -> str:
    out, err = p.communicate("\n", timeout=60)
    assert p.returncode == 0, err
    return out


# set_cmdline and the parent-death signal: the compiled calls (shoal/_proc.c) and ctypes
CPROC = [pytest.param({}, id="compiled"), pytest.param({"SHOAL_NO_CPROC": "1"}, id="ctypes")]


@pytest.mark.parametrize("env", CPROC)
def test_a_single_threaded_client_forks_a_clean_starter(tmp_path, env):
    p, words = _start_client(tmp_path, env=env)
    try:
        assert words[:2] == ["unflushed", "_Forked"], words
        starter, head, agent = (int(w) for w in words[2:5])
        assert words[-2:] == ["pipe", "True"], "the runtime holds the client's descriptors"
        assert sorted(_children(starter)) == sorted([head, agent])
        # named as a new interpreter would be, whole, though the client's line is short
        assert " -m shoal.head --connection " in _cmdline(head)
        assert " -m shoal.agent --connection " in _cmdline(agent)
        assert "shoal.launch.boot" in _cmdline(starter)
        assert os.getsid(starter) == starter and os.getsid(head) == head
        for pid in (starter, head, agent):  # /dev/null in, and none of the client's pipes
            assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
            pipes = {os.readlink(f"/proc/{p.pid}/fd/{words[5]}")}  # the read end
            assert not pipes & {os.readlink(f"/proc/{pid}/fd/{fd}")
                                for fd in os.listdir(f"/proc/{pid}/fd")}
    finally:
        out = _finish(p)
    # the client's unflushed output was written once, by the client
    assert (" ".join(words) + out).count("unflushed") == 1
    assert all(_gone(pid) for pid in (starter, head, agent))


def test_a_client_with_threads_starts_a_new_interpreter(tmp_path):
    p, words = _start_client(tmp_path, "thread")
    try:
        assert words[:2] == ["unflushed", "Popen"], words
        starter = int(words[2])
        assert " -m shoal.launch.boot --status " in _cmdline(starter)
    finally:
        _finish(p)


def test_shoal_fork_0_turns_the_forked_starter_off(tmp_path):
    prog = tmp_path / "c.py"
    prog.write_text(_CLIENT)
    p = subprocess.Popen([PY, "c.py"], cwd=tmp_path, text=True, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": ROOT, "SHOAL_FORK": "0"})
    try:
        assert p.stdout.readline().split()[:2] == ["unflushed", "Popen"]  # type: ignore[union-attr]
    finally:
        _finish(p)


def test_the_batch_variables_runtime_checks_are_those_discover_reads():
    from shoal.agent import resources
    from shoal.launch import allocation, runtime

    assert runtime._BATCH_VARS == allocation.BATCH_VARS == resources._BATCH_VARS


@pytest.mark.parametrize("env", CPROC)
def test_a_process_with_a_parent_death_signal_dies_with_its_parent(env):
    # shoal._sys.set_parent_death_signal, as the starter, head, agent and workers call it
    code = ("import os, sys, time\nfrom shoal._sys import set_parent_death_signal\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    set_parent_death_signal(9)\n"
            "    print(os.getpid(), flush=True)\n"
            "    time.sleep(60)\n"
            "    os._exit(0)\n"
            "time.sleep(0.5)\n")  # the parent exits; the child is killed, not orphaned
    p = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT, **env})
    child = int(p.stdout.readline())  # type: ignore[union-attr]
    p.wait(timeout=30)
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(child)
