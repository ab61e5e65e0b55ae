"""Harness of the failure tests: real heads, agents and clients as processes, real faults.

    tracker = Tracker()                       # the test process becomes a child subreaper
    c = Cluster(tmpdir, tracker, heartbeat_timeout=2)
    c.start_head()                            # python -m shoal.head --connection F ...
    a = c.agent("a", slots=2)                 # python -m shoal.agent --name a ...
    ex = c.executor(retries=5)                # Executor(connect=F, retries=5)
    c.wait_agents(ex, 1)
    a.kill()                                  # kill -9 (a.stop(), a.cont(), a.term())
    ...
    c.close(); assert not tracker.leftovers() # nothing the test started is left

Process tracking: the test process is made a child subreaper (prctl PR_SET_CHILD_SUBREAPER),
so every process it starts, and every descendant of those, stays its descendant even
when its parent dies (a worker whose agent was killed is reparented to the test, not to
init). Everything alive under the test process that was not there when the tracker was
made is "started by the test"; zombies of such orphans are reaped by the tracker.

Counting: tasks append their id to a ledger file opened with O_APPEND (see tasks.py);
``Ledger.counts()`` says how often each id ran; the futures say what was delivered.

Network cuts: ``NetNS`` makes a namespace joined to the host by a veth pair on a /30 of
its own; the head binds tcp on the host side's address, an agent runs in the namespace
(``ip netns exec``), and ``down()``/``up()`` take the namespace end of the link down/up.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from shoal.transport.connfile import Connection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(None, use_errno=True)


# ---- processes ---------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return rest[0], int(rest[1])


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def descendants(root: int) -> set[int]:
    """Every process below ``root`` now (zombies included)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                children[st[1]].append(int(name))
    out: set[int] = set()
    todo = [root]
    while todo:
        for kid in children.get(todo.pop(), ()):
            if kid not in out:
                out.add(kid)
                todo.append(kid)
    return out


def wait_for(cond: Callable[[], Any], timeout: float, interval: float = 0.05,
             what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something true; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


class Tracker:
    """Everything the test starts, with descendants; reaps orphans, finds leftovers."""

    def __init__(self) -> None:
        self.me = os.getpid()
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.baseline = descendants(self.me)
        self.owned: set[int] = set()     # PIDs a Popen of ours waits for: never reap those
        self.seen: dict[int, str] = {}   # every PID seen under us since, with its command line
        self.parent: dict[int, int] = {}  # the parent each was first seen with
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="tracker")
        self._thread.start()

    def own(self, proc: subprocess.Popen) -> subprocess.Popen:
        self.owned.add(proc.pid)
        self.seen[proc.pid] = cmdline(proc.pid)
        return proc

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            self.snapshot()

    def snapshot(self) -> set[int]:
        now = descendants(self.me) - self.baseline
        for pid in now:
            if pid not in self.seen:
                self.seen[pid] = cmdline(pid)
                st = _stat(pid)
                if st is not None:
                    self.parent[pid] = st[1]
        self.reap()
        return now

    def reap(self, all_orphans: bool = False) -> None:
        """Reap zombie orphans reparented to us: never a child we started ourselves (its
        Popen or subprocess.run waits for it), unless ``all_orphans`` (at the end)."""
        for pid in descendants(self.me) - self.baseline - self.owned:
            st = _stat(pid)
            if st is None or st[0] != "Z" or st[1] != self.me:
                continue
            if all_orphans or self.parent.get(pid, self.me) != self.me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def leftovers(self, wait: float = 0.0) -> dict[int, str]:
        """Live processes started by the test (and their descendants), after ``wait`` s."""
        deadline = time.monotonic() + wait
        while True:
            # with the subreaper, everything of ours that still runs is below us: no PID
            # recorded earlier (and perhaps reused since by another process) is trusted
            live = {p for p in self.snapshot() if pid_alive(p)}
            live -= self.baseline
            live.discard(self.me)
            if not live or time.monotonic() >= deadline:
                return {p: self.seen.get(p) or cmdline(p) for p in live}
            time.sleep(0.1)

    def kill_leftovers(self) -> dict[int, str]:
        left = self.leftovers()
        for pid in left:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if left:
            wait_for(lambda: not self.leftovers(), 10, what="leftovers to die")
        return left

    def close(self) -> dict[int, str]:
        """Kill whatever is left (returning it), stop watching, stop being a subreaper."""
        left = self.kill_leftovers()
        self._stop.set()
        self._thread.join(2)
        self.reap(all_orphans=True)
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        return left


def freeze_and_kill(pids: Iterable[int]) -> None:
    """kill -9 a set of processes as one crash: SIGSTOP all first, so none sees another die."""
    pids = list(pids)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def freeze_tree(root: int, timeout: float = 10.0) -> list[int]:
    """SIGSTOP ``root`` and every process below it; returns them (root first).

    A process listed once may fork or spawn (an agent starting a command) before its
    SIGSTOP takes effect: its new child would escape a single listing. So: stop what is
    listed, wait until each really is stopped, list again, until no new process appears."""
    frozen: list[int] = []
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        new = [p for p in [root, *sorted(descendants(root))] if p not in seen]
        if not new:
            return frozen
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            seen.add(pid)
            frozen.append(pid)
        for pid in new:  # kill() returns before the stop: a running one may still fork
            while (st := _stat(pid)) is not None and st[0] not in "TtZX":
                if st[0] == "D" and _vfork_parent_of_frozen(pid, seen):
                    break  # it runs again only once that child execs: frozen as well
                if time.monotonic() > deadline:
                    raise AssertionError(f"process {pid} ({cmdline(pid)}) did not stop")
                time.sleep(0.002)


def _vfork_parent_of_frozen(pid: int, frozen: set[int]) -> bool:
    """Whether ``pid`` waits (uninterruptibly, "D") on a child of its own that this freeze
    stopped: a ``posix_spawn`` (vfork) whose child was stopped before its exec. The parent
    cannot stop until the child has exec'd, which it never will while it is stopped; a
    SIGKILL still ends both."""
    for kid in frozen:
        st = _stat(kid)
        if st is not None and st[1] == pid and st[0] in "Tt":
            return True
    return False


def agent_dirs(pids: Iterable[int]) -> set[str]:
    """The temporary directories (``/tmp/shoal-agent-*``, the workers' socket) of the
    agents among ``pids``, found by that socket's inode: what a kill -9 of every process
    of a run leaves behind, the spawn helper that would remove them killed too. Call it
    while they still run (frozen is fine)."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    out = set()
    with open("/proc/net/unix") as fh:
        for line in fh.readlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[6] in inodes:
                d = os.path.dirname(fields[7])
                if os.path.basename(d).startswith("shoal-agent-"):
                    out.add(d)
    return out


def kill_tree(root: int) -> list[int]:
    """kill -9 of ``root`` and everything under it as one crash (frozen first: none sees
    another die, none starts a process that escapes); returns the PIDs killed."""
    pids = freeze_tree(root)
    freeze_and_kill(pids)
    return pids


class Proc:
    """A process the test started: a head, an agent or a client script."""

    def __init__(self, role: str, name: str, popen: subprocess.Popen, log: str) -> None:
        self.role, self.name, self.popen, self.log = role, name, popen, log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def kill(self) -> None:
        """kill -9 of this process alone (its children must notice by themselves)."""
        self.signal(signal.SIGKILL)

    def kill_tree(self) -> None:
        """kill -9 of this process and everything under it at once (a node or a run lost)."""
        kill_tree(self.pid)

    def stop(self) -> None:
        self.signal(signal.SIGSTOP)

    def cont(self) -> None:
        self.signal(signal.SIGCONT)

    def term(self) -> None:
        self.signal(signal.SIGTERM)

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self, tail: int = 3000) -> str:
        try:
            with open(self.log, errors="replace") as fh:
                return fh.read()[-tail:]
        except OSError:
            return ""

    def __repr__(self) -> str:
        return f"<{self.role} {self.name} pid {self.pid} rc {self.popen.poll()}>"


# ---- network namespaces ------------------------------------------------------------------------
def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class NetNS:
    """A network namespace joined to the host by its own veth pair (/30 of 10.251.0.0/16)."""

    _count = 0

    def __init__(self) -> None:
        NetNS._count += 1
        tag = f"{os.getpid() % 100000}{NetNS._count}"
        self.name = f"shoalt{tag}"
        self.host_if, self.ns_if = f"sfh{tag}"[:15], f"sfn{tag}"[:15]
        n = (os.getpid() * 7 + NetNS._count) % 16000
        base = (n * 4)
        self.host_ip = f"10.251.{base // 256}.{base % 256 + 1}"
        self.ns_ip = f"10.251.{base // 256}.{base % 256 + 2}"
        self._made: list[str] = []
        try:
            _ip("netns", "add", self.name)
            self._made.append("netns")
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            self._made.append("link")
            _ip("link", "set", self.ns_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
            _ip("-n", self.name, "link", "set", self.ns_if, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except Exception:
            self.close()
            raise

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def down(self) -> None:
        _ip("-n", self.name, "link", "set", self.ns_if, "down")

    def up(self) -> None:
        _ip("-n", self.name, "link", "set", self.ns_if, "up")

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def close(self) -> None:
        if "netns" in self._made:
            freeze_and_kill(self.pids())
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        if "link" in self._made:  # gone with the namespace's end; make sure
            subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        self._made = []


# ---- ledger --------------------------------------------------------------------------------------
class Ledger:
    """A file the tasks append one line per execution to (O_APPEND)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __str__(self) -> str:
        return self.path

    def lines(self) -> list[str]:
        try:
            with open(self.path) as fh:
                return [ln for ln in fh.read().splitlines() if ln]
        except FileNotFoundError:
            return []

    def counts(self) -> collections.Counter:
        return collections.Counter(ln.split()[0] for ln in self.lines())

    def ids(self) -> collections.Counter:
        return collections.Counter(int(k) for k in self.counts().elements())

    def twice(self) -> dict[int, int]:
        """ids that ran more than once, with how often."""
        return {int(k): n for k, n in self.counts().items() if n > 1}


def check_exactly_once(results: list[Any], n: int) -> None:
    """``results`` of ``record``-like tasks 0..n-1: each id delivered once, in place."""
    ids = [r[0] for r in results]
    assert len(ids) == n, f"{len(ids)} results for {n} tasks"
    dup = [k for k, c in collections.Counter(ids).items() if c > 1]
    assert not dup, f"delivered twice: {dup[:20]}"
    assert ids == list(range(n)), "results not those of their tasks"


# ---- a run: head, agents, clients -----------------------------------------------------------------
class Cluster:
    """A head with its connection file, agents and clients, all real processes."""

    def __init__(self, tmpdir: str, tracker: Tracker, *, heartbeat_timeout: float | None = 2.0,
                 crash_limit: int | None = None, address: str | None = None,
                 head_args: Iterable[str] = ()) -> None:
        self.tmp = str(tmpdir)
        self.tracker = tracker
        self.heartbeat_timeout = heartbeat_timeout
        self.crash_limit = crash_limit
        self.head_args = list(head_args)
        self.sockdir = tempfile.mkdtemp(prefix="shf-")  # short: ipc paths are <= 107 bytes
        self.conn = Connection.new(address or f"ipc://{self.sockdir}/head")
        self.connfile = os.path.join(self.tmp, "connection.json")
        self.conn.write(self.connfile)
        self.head: Proc | None = None
        self.agents: list[Proc] = []
        self.clients: list[Proc] = []
        self.executors: list[Any] = []
        self.netns: list[NetNS] = []

    # -- processes
    def _start(self, role: str, name: str, argv: list[str], prefix: list[str] | None = None,
               env: dict[str, str] | None = None) -> Proc:
        log = os.path.join(self.tmp, f"{role}-{name}.log")
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(
            [ROOT, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
        full_env.update(env or {})
        with open(log, "ab") as fh:
            popen = subprocess.Popen([*(prefix or []), *argv], stdin=subprocess.DEVNULL, stdout=fh,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     cwd=self.tmp, env=full_env)
        self.tracker.own(popen)
        return Proc(role, name, popen, log)

    def head_argv(self) -> list[str]:
        argv = [PY, "-m", "shoal.head", "--connection", self.connfile]
        if self.heartbeat_timeout is not None:
            argv += ["--heartbeat-timeout", str(self.heartbeat_timeout)]
        if self.crash_limit is not None:
            argv += ["--crash-limit", str(self.crash_limit)]
        return argv + self.head_args

    def start_head(self, extra: Iterable[str] = ()) -> Proc:
        self.head = self._start("head", "head", [*self.head_argv(), *extra])
        return self.head

    def agent(self, name: str, slots: int = 2, *, workers: int | None = None,
              extra: Iterable[str] = (), netns: NetNS | None = None,
              connfile: str | None = None) -> Proc:
        argv = [PY, "-m", "shoal.agent", "--connection", connfile or self.connfile,
                "--slots", str(slots), "--workers", str(slots if workers is None else workers),
                "--name", name, "--sys-path", json.dumps([ROOT]), *extra]
        proc = self._start("agent", name, argv, prefix=netns.prefix() if netns else None)
        self.agents.append(proc)
        return proc

    def client_script(self, name: str, code: str) -> Proc:
        """A client in its own process: ``code`` runs with CONNFILE and ROOT defined."""
        path = os.path.join(self.tmp, f"client-{name}.py")
        with open(path, "w") as fh:
            fh.write(f"CONNFILE = {self.connfile!r}\nROOT = {ROOT!r}\nimport sys\n"
                     "sys.path.insert(0, ROOT)\n" + code)
        proc = self._start("client", name, [PY, path])
        self.clients.append(proc)
        return proc

    def make_netns(self) -> NetNS:
        ns = NetNS()
        self.netns.append(ns)
        return ns

    def connection_for(self, address: str, name: str) -> str:
        """Another connection file of this run (same secret) that names ``address``."""
        path = os.path.join(self.tmp, f"connection-{name}.json")
        dataclasses.replace(self.conn, address=address).write(path)
        return path

    # -- clients
    def executor(self, connfile: str | None = None, **kw: Any) -> Any:
        from shoal import Executor

        if self.head is not None:
            wait_for(lambda: os.path.exists(self.conn.address[len("ipc://"):])
                     if self.conn.address.startswith("ipc://") else True, 5, 0.02, "the head")
            self.check_head()
        kw.setdefault("start_timeout", 30.0)
        ex = Executor(connect=connfile or self.connfile, **kw)
        self.executors.append(ex)
        return ex

    def wait_agents(self, ex: Any, n: int, timeout: float = 60.0) -> list[Any]:
        """Wait until the head lists ``n`` agents; returns them."""
        def enough() -> list[Any] | None:
            self.check_head()
            infos = ex.agents()
            return infos if len(infos) >= n else None
        return wait_for(enough, timeout, 0.1, f"{n} agents")

    def check_head(self) -> None:
        """Fail at once, with its output, if the head exited (e.g. it refused a flag)."""
        if self.head is not None and self.head.poll() is not None:
            raise AssertionError(f"the head exited with status {self.head.poll()}:\n"
                                 f"{self.head.output()}")

    def agent_numbers(self, ex: Any) -> dict[int, int]:
        """pid -> number the head gave each connected agent (AgentInfo has no number: this
        asks the head with the client's own AGENTS request)."""
        from shoal.transport import protocol as P

        return {a["pid"]: a["num"] for a in ex._request([P.AGENTS], 10.0)[0]}

    def agent_pids(self, ex: Any) -> set[int]:
        return {a.pid for a in ex.agents()}

    # -- teardown
    def describe(self) -> str:
        """Exit statuses and the tail of every log (for assertion messages)."""
        out = []
        for p in [*([self.head] if self.head else []), *self.agents, *self.clients]:
            out.append(f"--- {p!r}\n{p.output(1500)}")
        return "\n".join(out)

    def close(self, grace: float = 10.0) -> None:
        """Shut everything down in order (clients, agents, head); kill what does not go."""
        for ex in self.executors:
            try:
                ex.shutdown(wait=False, cancel_futures=True)
                ex._terminate()
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass
        procs = [*self.clients, *self.agents, *([self.head] if self.head else [])]
        for p in procs:
            p.cont()
        for p in self.clients:
            p.kill()
        for p in self.agents:
            p.term()
        deadline = time.monotonic() + grace
        for p in self.agents:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill_tree()
        if self.head is not None:
            self.head.term()
            try:
                self.head.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.head.kill_tree()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill_tree()
                p.wait(5)
        for ns in self.netns:
            ns.close()
        shutil.rmtree(self.sockdir, ignore_errors=True)


def free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
