"""The agent under failure, tested alone: the test plays the head.

A ROUTER socket on an ipc endpoint in a temp dir, a connection file, the real agent
(``python -m shoal.agent``) in a subprocess, and the protocol spoken by hand: HELLO ->
WELCOME, TASKS with full 11-field specs, then RESULTS / CREDIT / RETURN / DRAIN / BYE read
back. Every process a test starts is killed by pid at the end.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import cloudpickle
import pytest
import zmq

from shoal.agent.failures import (
    OomWatch,
    allocation_end,
    failure_info,
    oom_counter_file,
    oom_kills,
    parse_walltime,
)
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection
from shoal.transport.session import HeadSessions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
AGENT_ORIGIN = 1 << 16
CLIENT = 1 << 32          # tids of the (pretend) client with origin 1

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests


# ---- task functions (run in the agent's workers) ----------------------------------------
def add(a: int, b: int) -> int:
    return a + b


def fail(msg: str) -> None:
    raise ValueError(msg)


def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def stuck_in_c(seconds: int) -> None:
    import ctypes

    ctypes.CDLL(None).sleep(seconds)   # holds the GIL: no signal handler, no switch


def write_pid_then_nap(path: str, seconds: float) -> None:
    with open(path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(seconds)


def set_secret(value: str) -> int:
    os.environ["SHOAL_TEST_SECRET"] = value
    return os.getpid()


def read_secret() -> tuple[str | None, int]:
    return os.environ.get("SHOAL_TEST_SECRET"), os.getpid()


def submit_children(n: int) -> int:
    from shoal.task.context import current

    ctx = current()
    for i in range(n):
        ctx.submit(add, i, i)
    return n


def wait_on_children(n: int) -> list[int]:
    from shoal.task.context import current

    futs = [current().submit(add, i, i) for i in range(n)]  # the last ones go out
    return [f.result() for f in futs]


# ---- the pretend head ----------------------------------------------------------------------
class FakeHead:
    def __init__(self, tmp: str, name: str = "head") -> None:
        self.tmp = tmp
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.address = f"ipc://{tmp}/{name}"
        self.sock.bind(self.address)
        self.conn = Connection.new(self.address)
        self.connfile = os.path.join(tmp, "connection.json")
        self.conn.write(self.connfile)
        self.codec = HeadSessions(self.conn.key)  # the head's end of each agent's session
        self.procs: list[subprocess.Popen] = []
        self.agents: dict[bytes, float] = {}   # welcomed ident -> heartbeat_s
        self.beats = True                       # send heartbeats while waiting
        self.last_beat = 0.0
        self.seq = 0
        self.fid = 0
        self.fids: dict[Any, int] = {}

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()

    # agents
    def start_agent(self, *args: str, slots: int = 2) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        log = open(os.path.join(self.tmp, f"agent{len(self.procs)}.log"), "wb")  # noqa: SIM115
        p = subprocess.Popen([PY, "-m", "shoal.agent", "--connection", self.connfile,
                              "--slots", str(slots), *args],
                             env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def log_of(self, i: int = 0) -> str:
        with open(os.path.join(self.tmp, f"agent{i}.log")) as fh:
            return fh.read()

    def join(self, heartbeat_s: float = 0.5, timeout_s: float = 8.0, prefetch: int = 1,
             origin: int = AGENT_ORIGIN, wait: float = 20.0) -> bytes:
        ident, msg = self.expect(P.HELLO, wait)
        assert msg[1] == "agent"
        self.welcome(ident, heartbeat_s, timeout_s, prefetch, origin)
        return ident

    def welcome(self, ident: bytes, heartbeat_s: float = 0.5, timeout_s: float = 8.0,
                prefetch: int = 1, origin: int = AGENT_ORIGIN) -> None:
        self.send(ident, [P.WELCOME, {"origin": origin, "prefetch": prefetch, "run_id": "t",
                                      "slots": 2, "heartbeat_s": heartbeat_s,
                                      "timeout_s": timeout_s, "num": 1}])
        self.agents[ident] = heartbeat_s

    # messages
    def send(self, ident: bytes, msg: list[Any]) -> None:
        self.sock.send_multipart([ident, *self.codec.encode(ident, msg)])

    def recv(self, timeout: float) -> tuple[bytes, list[Any]] | None:
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if self.beats and self.agents and now - self.last_beat >= 0.2:
                self.last_beat = now
                for ident in self.agents:
                    self.send(ident, [P.HEARTBEAT])
            left = deadline - now
            if left <= 0:
                return None
            if self.sock.poll(min(left, 0.1) * 1000):
                ident, sig, body = self.sock.recv_multipart()
                msg = self.codec.decode(ident, sig, body)
                if msg is not None:  # None: sent before its session (a heartbeat)
                    return ident, msg

    def expect(self, kind: int, timeout: float = 20.0) -> tuple[bytes, list[Any]]:
        """The next message of ``kind`` (others, heartbeats and credit, are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.recv(deadline - time.monotonic())
            if got is not None and got[1][0] == kind:
                return got
        raise AssertionError(f"no message of kind {kind} within {timeout} s")

    def collect(self, seconds: float, kinds: tuple[int, ...] = (P.RESULTS,)) -> list[list[Any]]:
        """Every message of ``kinds`` for ``seconds``."""
        out = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            got = self.recv(deadline - time.monotonic())
            if got is not None and got[1][0] in kinds:
                out.append(got[1])
        return out

    def results(self, tids: set[int], timeout: float = 30.0) -> dict[int, list[Any]]:
        """Wait for the results of ``tids`` (each exactly once); tid -> result."""
        got: dict[int, list[Any]] = {}
        deadline = time.monotonic() + timeout
        while set(got) != tids:
            left = deadline - time.monotonic()
            assert left > 0, f"missing results of {sorted(tids - set(got))}; had {got}"
            m = self.recv(left)
            if m is None or m[1][0] != P.RESULTS:
                continue
            for item in m[1][1]:
                assert item[0] not in got, f"result of {item[0]} twice"
                got[item[0]] = item
        return got

    # tasks
    def tid(self) -> int:
        self.seq += 1
        return CLIENT | self.seq

    def py(self, fn: Any, *args: Any, attempt: int = 1, owner: int = 1,
           opts: dict[str, Any] | None = None) -> tuple[list[Any], dict[int, bytes]]:
        fid = self.fids.get(fn)
        if fid is None:  # one id per function, as a client does: run times add up per id
            self.fid += 1
            fid = self.fids[fn] = CLIENT | (1 << 31) | self.fid
        spec = [self.tid(), P.PY, fid, pickle.dumps((args, {})), [], 1, -1, None, opts,
                attempt, owner]
        return spec, {fid: cloudpickle.dumps(fn)}

    def cmd(self, argv: list[str], attempt: int = 1, owner: int = 1,
            opts: dict[str, Any] | None = None, **extra: Any) -> list[Any]:
        return [self.tid(), P.CMD, 0, {"argv": argv, **extra}, [], 1, -1, None, opts,
                attempt, owner]

    def give(self, ident: bytes, *tasks: Any) -> list[int]:
        specs, funcs = [], {}
        for t in tasks:
            if isinstance(t, tuple):
                specs.append(t[0])
                funcs.update(t[1])
            else:
                specs.append(t)
        self.send(ident, [P.TASKS, specs, funcs])
        return [s[0] for s in specs]


@pytest.fixture
def head():
    tmp = tempfile.mkdtemp(prefix="shoal-test-agent-")
    h = FakeHead(tmp)
    try:
        yield h
    finally:
        for p in h.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        h.close()
        subprocess.run(["rm", "-rf", tmp], check=False)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped between open and read
        return False


def wait_for(pred: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return bool(pred())


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    return [int(a) for a, b in (line.split() for line in out.splitlines()) if int(b) == pid]


def group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True).stdout
    return [int(f[0]) for f in (line.split() for line in out.splitlines())
            if int(f[1]) == pgid and not f[2].startswith("Z")]


def read_pid(path: str, timeout: float = 20.0) -> int:
    assert wait_for(lambda: os.path.exists(path) and os.path.getsize(path) > 0, timeout), path
    with open(path) as fh:
        return int(fh.read())


# ---- unit pieces -----------------------------------------------------------------------------
def test_failure_info_is_one_line_with_the_mro() -> None:
    info = failure_info(KeyError("a\nb " + "x" * 400))
    assert "\n" not in info["why"] and len(info["why"]) <= 300
    assert info["why"].startswith("KeyError: ")
    assert info["types"][:3] == ["builtins.KeyError", "builtins.LookupError", "builtins.Exception"]


def test_walltime_formats() -> None:
    assert parse_walltime("90") == 90
    assert parse_walltime("2:30") == 150
    assert parse_walltime("1:00:05") == 3605
    assert parse_walltime("1-00:00:01") == 86401
    for bad in ("", "soon", "0", "1:2:3:4"):
        with pytest.raises(ValueError, match="--walltime"):
            parse_walltime(bad)


def test_allocation_end_is_the_first_of_walltime_and_the_batch_job_end() -> None:
    t0 = time.monotonic()
    assert allocation_end(None, t0, {}) is None
    assert allocation_end(50.0, t0, {}) == t0 + 50
    slurm = {"SLURM_JOB_END_TIME": str(int(time.time()) + 100)}
    assert abs(allocation_end(None, t0, slurm) - (time.monotonic() + 100)) < 2
    assert allocation_end(50.0, t0, slurm) == t0 + 50
    assert allocation_end(None, t0, {"SLURM_JOB_END_TIME": "junk"}) is None


def test_oom_counter_from_cgroup_files(tmp_path: Any) -> None:
    root = tmp_path / "fs"
    (root / "job").mkdir(parents=True)
    (root / "memory" / "old").mkdir(parents=True)
    (root / "job" / "memory.events").write_text("oom 0\noom_kill 0\n")
    (root / "memory" / "old" / "memory.oom_control").write_text("under_oom 0\noom_kill 0\n")
    (tmp_path / "v2").write_text("0::/job\n")
    assert oom_counter_file(str(tmp_path / "v2"), str(root)) == str(root / "job" / "memory.events")
    (tmp_path / "v1").write_text("4:memory:/old\n0::/\n")
    assert oom_counter_file(str(tmp_path / "v1"), str(root)) == \
        str(root / "memory" / "old" / "memory.oom_control")
    (tmp_path / "none").write_text("1:cpu:/x\n")
    assert oom_counter_file(str(tmp_path / "none"), str(root)) is None
    events = root / "job" / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n")
    assert oom_kills(str(events)) == 1
    watch = OomWatch(str(events))
    assert not watch.struck()
    events.write_text("low 0\nhigh 0\nmax 4\noom 3\noom_kill 2\n")
    assert watch.struck()
    assert not watch.struck()
    assert not OomWatch(str(tmp_path / "absent")).struck()


def test_bad_arguments_exit_2(head: FakeHead) -> None:
    p = head.start_agent("--walltime", "soon")
    assert p.wait(30) == 2
    assert "--walltime 'soon'" in head.log_of()
    p = head.start_agent("--drain-timeout", "-1")
    assert p.wait(30) == 2


# ---- results -----------------------------------------------------------------------------------
def test_results_carry_attempt_and_info(head: FakeHead) -> None:
    head.start_agent(slots=2)
    ident = head.join()
    ok = head.py(add, 2, 3, attempt=2)
    bad = head.py(fail, "boom", attempt=1)
    c_ok = head.cmd(["true"], attempt=3)
    c_bad = head.cmd(["sh", "-c", "exit 4"], attempt=4, check=True)
    c_launch = head.cmd(["/no/such/program"], attempt=5)
    tids = head.give(ident, ok, bad, c_ok, c_bad, c_launch)
    got = head.results(set(tids))
    r = got[tids[0]]
    assert len(r) == 5 and r[P.R_STATUS] == P.OK and pickle.loads(r[P.R_PAYLOAD]) == 5
    assert r[P.R_ATTEMPT] == 2 and r[P.R_INFO] is None
    r = got[tids[1]]
    assert r[P.R_STATUS] == P.ERR and r[P.R_ATTEMPT] == 1
    assert r[P.R_INFO]["why"] == "ValueError: boom"
    assert r[P.R_INFO]["types"][:2] == ["builtins.ValueError", "builtins.Exception"]
    r = got[tids[2]]
    assert r[P.R_STATUS] == P.OK and r[P.R_ATTEMPT] == 3
    r = got[tids[3]]
    assert r[P.R_STATUS] == P.ERR and r[P.R_ATTEMPT] == 4
    assert r[P.R_INFO]["types"][0] == "shoal.task.command.CommandError"
    assert "subprocess.CalledProcessError" in r[P.R_INFO]["types"][1]
    assert "exit status 4" in r[P.R_INFO]["why"]
    r = got[tids[4]]
    assert r[P.R_STATUS] == P.ERR and r[P.R_ATTEMPT] == 5
    assert "command not found" in r[P.R_INFO]["why"]


def test_worker_killed_by_signal_9_is_lost_and_says_so(head: FakeHead) -> None:
    head.start_agent(slots=1)
    ident = head.join()
    pidfile = os.path.join(head.tmp, "w.pid")
    (tid,) = head.give(ident, head.py(write_pid_then_nap, pidfile, 60, attempt=7))
    os.kill(read_pid(pidfile), signal.SIGKILL)
    r = head.results({tid})[tid]
    assert r[P.R_STATUS] == P.LOST and r[P.R_ATTEMPT] == 7
    assert "killed by signal 9 (SIGKILL)" in r[P.R_PAYLOAD].decode()
    assert "killed by signal 9" in r[P.R_INFO]["why"]
    (tid,) = head.give(ident, head.py(add, 1, 1))  # a fresh worker took its place
    assert pickle.loads(head.results({tid})[tid][P.R_PAYLOAD]) == 2


def hog(mb: int) -> None:
    blocks = []
    for _ in range(mb):
        blocks.append(bytearray(1 << 20))   # touched: really resident


def test_worker_killed_by_the_oom_killer_is_lost_and_says_so(head: FakeHead) -> None:
    cg = f"/sys/fs/cgroup/memory/shoal-test-{os.getpid()}"
    try:
        os.mkdir(cg)
    except OSError:
        pytest.skip("cannot make a cgroup v1 memory group here")
    try:
        with open(f"{cg}/memory.limit_in_bytes", "w") as fh:
            fh.write(str(300 << 20))
        env = dict(os.environ, PYTHONPATH=ROOT)
        p = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$0" "$@"', PY, "-m",
             "shoal.agent", "--connection", head.connfile, "--slots", "1"],
            env=env, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        head.procs.append(p)
        ident = head.join()
        (tid,) = head.give(ident, head.py(hog, 2000, attempt=2))
        r = head.results({tid}, timeout=60)[tid]
        assert r[P.R_STATUS] == P.LOST and r[P.R_ATTEMPT] == 2
        why = r[P.R_PAYLOAD].decode()
        assert "killed by signal 9" in why and "out-of-memory killer" in why, why
        (tid,) = head.give(ident, head.py(add, 1, 1))  # a fresh worker took its place
        assert head.results({tid})[tid][P.R_STATUS] == P.OK
    finally:
        for p in head.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        wait_for(lambda: not open(f"{cg}/cgroup.procs").read().strip(), 10)
        os.rmdir(cg)


# ---- time limits ---------------------------------------------------------------------------------
def test_command_ignoring_sigterm_is_killed_after_the_grace(head: FakeHead) -> None:
    head.start_agent("--kill-grace", "1", slots=1)
    ident = head.join()
    pidfile = os.path.join(head.tmp, "cmd.pid")
    spec = head.cmd(["sh", "-c", f'trap "" TERM; echo $$ > {pidfile}; sleep 60 & wait'],
                    attempt=2, opts={"timeout": 1})
    t0 = time.monotonic()
    (tid,) = head.give(ident, spec)
    pid = read_pid(pidfile)
    r = head.results({tid})[tid]
    took = time.monotonic() - t0
    assert r[P.R_STATUS] == P.TIMEOUT and r[P.R_ATTEMPT] == 2
    text = r[P.R_PAYLOAD].decode()
    assert "timed out after 1 s" in text and "SIGKILL" in text and "SIGTERM" in text
    assert took >= 1.9  # the limit, then the whole grace
    assert not alive(pid)
    assert wait_for(lambda: not group_alive(pid), 5)


def test_command_stopping_on_sigterm_times_out(head: FakeHead) -> None:
    head.start_agent(slots=1)
    ident = head.join()
    (tid,) = head.give(ident, head.cmd(["sleep", "60"], opts={"timeout": 0.5}))
    r = head.results({tid})[tid]
    assert r[P.R_STATUS] == P.TIMEOUT
    assert r[P.R_PAYLOAD].decode() == "timed out after 0.5 s (killed with SIGTERM)"


def test_python_task_stuck_in_c_code_is_killed_at_its_limit(head: FakeHead) -> None:
    head.start_agent(slots=1)
    ident = head.join()
    first = head.py(nap, 0)
    (tid0,) = head.give(ident, first)
    pid_before = pickle.loads(head.results({tid0})[tid0][P.R_PAYLOAD])
    t0 = time.monotonic()
    stuck = head.py(stuck_in_c, 60, attempt=3, opts={"timeout": 1.0})
    after = head.py(nap, 0)
    tids = head.give(ident, stuck, after)
    got = head.results(set(tids))
    r = got[tids[0]]
    assert r[P.R_STATUS] == P.TIMEOUT and r[P.R_ATTEMPT] == 3
    assert "timed out after 1 s" in r[P.R_PAYLOAD].decode()
    assert time.monotonic() - t0 < 30
    assert got[tids[1]][P.R_STATUS] == P.OK
    pid_after = pickle.loads(got[tids[1]][P.R_PAYLOAD])
    assert pid_after != pid_before and not alive(pid_before)


def test_python_task_waiting_on_sub_tasks_times_out(head: FakeHead) -> None:
    head.start_agent(slots=1)
    ident = head.join()
    (tid,) = head.give(ident, head.py(wait_on_children, 4, attempt=2, opts={"timeout": 1.5}))
    _, sub = head.expect(P.SUBMIT)   # never answered: the task waits for ever
    assert sub[1]
    r = head.results({tid})[tid]
    assert r[P.R_STATUS] == P.TIMEOUT and r[P.R_ATTEMPT] == 2
    (tid,) = head.give(ident, head.py(add, 3, 4))
    assert pickle.loads(head.results({tid})[tid][P.R_PAYLOAD]) == 7


# ---- stopping running tasks ----------------------------------------------------------------------
def test_cancel_stops_running_command_and_python_task(head: FakeHead) -> None:
    head.start_agent(slots=2)
    ident = head.join()
    pidfile = os.path.join(head.tmp, "w.pid")
    cmdpid = os.path.join(head.tmp, "c.pid")
    tids = head.give(ident, head.cmd(["sh", "-c", f"echo $$ > {cmdpid}; exec sleep 60"]),
                     head.py(write_pid_then_nap, pidfile, 60))
    wpid, cpid = read_pid(pidfile), read_pid(cmdpid)
    time.sleep(0.3)
    head.send(ident, [P.CANCEL, 0, tids])  # the owner is gone: stop them, say nothing
    assert wait_for(lambda: not alive(wpid) and not alive(cpid), 10)
    # the worker was replaced: the next task runs; nothing came for the stopped ones
    (tid,) = head.give(ident, head.py(add, 1, 2))
    seen = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = head.recv(1.0)
        if m and m[1][0] == P.RESULTS:
            seen += [item[0] for item in m[1][1]]
            if tid in seen:
                break
    assert seen == [tid]
    # a client's cancel of a running one is answered with what was stopped
    (t2,) = head.give(ident, head.py(write_pid_then_nap, pidfile + "2", 60))
    wpid2 = read_pid(pidfile + "2")
    head.send(ident, [P.CANCEL, 42, [t2, 999]])
    _, msg = head.expect(P.CANCEL)
    assert msg[1] == 42 and msg[2] == [t2]
    assert wait_for(lambda: not alive(wpid2), 10)
    assert not [m for m in head.collect(1.0) if any(i[0] == t2 for i in m[1])]


def test_cancel_of_queued_only_leaves_running_tasks_alone(head: FakeHead) -> None:
    head.start_agent(slots=1)
    ident = head.join()
    pidfile = os.path.join(head.tmp, "w.pid")
    (run,) = head.give(ident, head.py(write_pid_then_nap, pidfile, 1.0))
    read_pid(pidfile)
    (queued,) = head.give(ident, head.cmd(["true"]))  # waits: the only core is busy
    time.sleep(0.2)
    head.send(ident, [P.CANCEL, 9, [run, queued], True])  # shutdown(cancel_futures=True)
    _, msg = head.expect(P.CANCEL)
    assert msg[1:3] == [9, [queued]]
    assert head.results({run})[run][P.R_STATUS] == P.OK


# ---- eviction -------------------------------------------------------------------------------------
def test_evicted_agent_drops_everything_and_joins_again(head: FakeHead) -> None:
    head.start_agent(slots=2)
    ident = head.join()
    cmdpid = os.path.join(head.tmp, "c.pid")
    pidfile = os.path.join(head.tmp, "w.pid")
    old = head.give(ident, head.cmd(["sh", "-c", f"echo $$ > {cmdpid}; exec sleep 2"]),
                    head.py(write_pid_then_nap, pidfile, 2))
    cpid, wpid = read_pid(cmdpid), read_pid(pidfile)
    head.send(ident, [P.EVICTED, "silent for 9 s"])
    ident2, msg = head.expect(P.HELLO, 10)
    assert ident2 == ident
    assert wait_for(lambda: not alive(cpid) and not alive(wpid), 10)
    head.welcome(ident, origin=2 * AGENT_ORIGIN)
    (new,) = head.give(ident, head.py(add, 20, 22))
    stale = []
    got = None
    deadline = time.monotonic() + 4  # past when the old tasks would have finished
    while time.monotonic() < deadline:
        m = head.recv(0.5)
        if m and m[1][0] == P.RESULTS:
            for item in m[1][1]:
                if item[0] in old:
                    stale.append(item)
                elif item[0] == new:
                    got = item
    assert not stale
    assert got is not None and pickle.loads(got[P.R_PAYLOAD]) == 42
    assert "evicted by the head (silent for 9 s)" in head.log_of()


# ---- head loss -----------------------------------------------------------------------------------
def test_silent_head_stops_tasks_and_exits_3(head: FakeHead) -> None:
    p = head.start_agent(slots=2)
    ident = head.join(heartbeat_s=0.2, timeout_s=2.0)
    cmdpid = os.path.join(head.tmp, "c.pid")
    pidfile = os.path.join(head.tmp, "w.pid")
    head.give(ident, head.cmd(["sh", "-c", f"echo $$ > {cmdpid}; sleep 60 & wait"]),
              head.py(write_pid_then_nap, pidfile, 60))
    cpid, wpid = read_pid(cmdpid), read_pid(pidfile)
    head.beats = False       # the head goes silent (it still reads: heartbeats come in)
    beats = head.collect(1.0, (P.HEARTBEAT,))
    assert beats, "the agent sends heartbeats while it has nothing else to say"
    assert p.wait(20) == 3
    assert "no word from the head" in head.log_of()
    assert not alive(cpid) and not alive(wpid)
    assert wait_for(lambda: not group_alive(cpid), 5)
    assert not children_of(p.pid)


def test_reconnect_waits_for_a_new_head_on_the_same_connection_file(head: FakeHead) -> None:
    p = head.start_agent("--reconnect", "30", slots=1)
    ident = head.join(heartbeat_s=0.2, timeout_s=1.5)
    pidfile = os.path.join(head.tmp, "w.pid")
    head.give(ident, head.py(write_pid_then_nap, pidfile, 60))
    wpid = read_pid(pidfile)
    head.beats = False
    head.collect(3.0, ())
    assert wait_for(lambda: not alive(wpid), 10)  # its tasks were stopped
    assert p.poll() is None
    # a new head on the same connection file: a new address and a new secret
    new = FakeHead(head.tmp, name="head2")
    try:
        assert new.connfile == head.connfile
        ident2 = new.join(wait=20)
        (tid,) = new.give(ident2, new.py(add, 4, 5))
        assert pickle.loads(new.results({tid})[tid][P.R_PAYLOAD]) == 9
        assert p.poll() is None
    finally:
        new.close()


def test_reconnect_gives_up_after_its_window_with_status_3(head: FakeHead) -> None:
    p = head.start_agent("--reconnect", "2", slots=1)
    head.join(heartbeat_s=0.2, timeout_s=1.0)
    head.beats = False
    assert p.wait(30) == 3
    assert "no head came back within 2 s" in head.log_of()
    assert not children_of(p.pid)


def test_a_second_sigterm_stops_a_drain_at_once(head: FakeHead) -> None:
    p = head.start_agent(slots=1)
    ident = head.join()
    pidfile = os.path.join(head.tmp, "w.pid")
    (tid,) = head.give(ident, head.py(write_pid_then_nap, pidfile, 60))
    wpid = read_pid(pidfile)
    p.send_signal(signal.SIGTERM)
    head.expect(P.DRAIN)
    time.sleep(0.5)
    assert p.poll() is None  # draining: the running task may finish
    p.send_signal(signal.SIGTERM)
    _, bye = head.expect(P.BYE, 10)
    assert bye[1] == "shutdown"
    assert p.wait(10) == 0
    assert not alive(wpid)


def test_agent_frozen_past_the_timeout_does_not_give_up_on_a_live_head(head: FakeHead) -> None:
    p = head.start_agent(slots=1)
    ident = head.join(heartbeat_s=0.2, timeout_s=2.0)
    (tid,) = head.give(ident, head.py(add, 1, 1))
    head.results({tid})
    head.beats = False
    os.kill(p.pid, signal.SIGSTOP)
    try:
        time.sleep(5.0)   # 2.5 x the timeout
    finally:
        os.kill(p.pid, signal.SIGCONT)
    # the head declared it lost meanwhile: the agent's next word is answered with EVICTED
    m = head.recv(5.0)
    assert m is not None and m[0] == ident
    head.send(ident, [P.EVICTED, "silent for 5 s"])
    head.expect(P.HELLO, 10)
    head.welcome(ident, heartbeat_s=0.2, timeout_s=2.0, origin=2 * AGENT_ORIGIN)
    head.beats = True
    head.collect(4.0, ())
    assert p.poll() is None, head.log_of()
    (tid,) = head.give(ident, head.py(add, 2, 2))
    assert pickle.loads(head.results({tid})[tid][P.R_PAYLOAD]) == 4


# ---- drain ---------------------------------------------------------------------------------------
def test_sigterm_drains_returns_unstarted_and_finishes_running(head: FakeHead) -> None:
    p = head.start_agent("--drain-timeout", "6", slots=3)
    ident = head.join()
    # make nap known-short so the worker is sent a queue of them (prefetched in the worker)
    warm = [head.py(nap, 0) for _ in range(30)]
    head.results(set(head.give(ident, *warm)))
    running = [head.py(nap, 1.5), head.cmd(["sleep", "1.5"])]
    queued = [head.py(nap, 0) for _ in range(6)] + [head.cmd(["true"]) for _ in range(3)]
    too_long = head.cmd(["sleep", "60"])
    all_tids = head.give(ident, *running, too_long, *queued)
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    results: dict[int, list[Any]] = {}
    returned: list[int] = []
    order = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = head.recv(1.0)
        if m is None:
            continue
        kind = m[1][0]
        order.append(kind)
        if kind == P.RESULTS:
            for item in m[1][1]:
                assert item[0] not in results
                results[item[0]] = item
        elif kind == P.RETURN:
            returned += m[1][1]
        elif kind == P.BYE:
            assert m[1][1] == "drained"
            break
    assert p.wait(10) == 0
    assert P.DRAIN in order and order.index(P.DRAIN) < order.index(P.BYE)
    assert P.CREDIT not in order[order.index(P.DRAIN):]
    assert len(returned) == len(set(returned))
    assert not set(returned) & set(results)
    assert set(returned) | set(results) == set(all_tids)   # nothing lost, nothing twice
    for tid in all_tids[:2]:  # the running ones finished
        assert results[tid][P.R_STATUS] == P.OK
    assert too_long[0] in returned   # killed at the deadline and handed back
    assert time.monotonic() - t0 >= 5.5
    assert len(returned) >= 4
    log = head.log_of()
    assert "drain deadline: killed and handed back 1 running tasks" in log, log
    assert "drained" in log


def test_drain_takes_back_what_a_worker_had_queued(head: FakeHead) -> None:
    p = head.start_agent(slots=1)
    ident = head.join()
    head.results(set(head.give(ident, *[head.py(nap, 0) for _ in range(30)])))
    long, *short = head.give(ident, head.py(nap, 1.5), *[head.py(nap, 0) for _ in range(5)])
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    returned, results = [], {}
    for msg in head.collect(5.0, (P.RETURN, P.RESULTS, P.BYE)):
        if msg[0] == P.RETURN:
            returned += msg[1]
        elif msg[0] == P.RESULTS:
            results.update({i[0]: i for i in msg[1]})
        else:
            break
    assert sorted(returned) == sorted(short) and set(results) == {long}
    assert p.wait(10) == 0
    assert "worker 0 handed back 5 tasks it had queued" in head.log_of()


def test_walltime_starts_the_drain(head: FakeHead) -> None:
    t0 = time.monotonic()
    p = head.start_agent("--walltime", "3", "--drain-timeout", "1.5", slots=1)
    head.join()
    _, msg = head.expect(P.DRAIN, 20)
    assert msg[1].startswith("walltime")
    assert time.monotonic() - t0 >= 1.5   # walltime minus the drain timeout, from its start
    head.expect(P.BYE, 10)
    assert p.wait(10) == 0


# ---- one client per worker -------------------------------------------------------------------------
def test_a_worker_serves_one_client_at_a_time(head: FakeHead) -> None:
    head.start_agent(slots=1)
    ident = head.join()
    (t1,) = head.give(ident, head.py(set_secret, "of client 1", owner=1))
    pid1 = pickle.loads(head.results({t1})[t1][P.R_PAYLOAD])
    (t1b,) = head.give(ident, head.py(read_secret, owner=1))
    assert pickle.loads(head.results({t1b})[t1b][P.R_PAYLOAD]) == ("of client 1", pid1)
    (t2,) = head.give(ident, head.py(read_secret, owner=2))
    secret, pid2 = pickle.loads(head.results({t2})[t2][P.R_PAYLOAD])
    assert secret is None and pid2 != pid1
    # sub-tasks a worker submits belong to its client
    (t3,) = head.give(ident, head.py(submit_children, 4, owner=2))
    _, msg = head.expect(P.SUBMIT)
    assert msg[1] and all(len(s) == P.TASK_LEN and s[P.T_OWNER] == 2 for s in msg[1])
