"""A runtime over a whole allocation: the head here, one agent per node through a launcher.

``Executor()`` (and ``python -m shoal``, ``shoal run``) inside a discovered allocation
gets an :class:`AllocationCluster` instead of the embedded local default: the head runs
as a child of this process (as ``shoal.launch.local`` starts it), bound to an address the
nodes reach (this host's name resolved or its default route, or ``interface=``), and a
launcher (``shoal.launch.launchers``) starts one agent per node. The constructor returns
once every node's agent joined, or once each of the others failed, with one line per
failed node naming it, the address tried and the fix; no agent at all is an error.

Each node first runs this module (``python -m shoal.launch.cluster``): it names the
agent after the node, tests the TCP path back to the head (the connectivity self-test;
a failure is one marked line on stderr within seconds) and then becomes the agent.

The connection file is written to a run directory every node can read: ``SHOAL_RUN_DIR``,
else ``.shoal/`` in the current directory (a batch job's submit directory is shared).
Everything started here stops with :meth:`AllocationCluster.stop`, and when this process
dies: the head and the launchers get its death signal, and the agents leave with their
head (a scancel ends the job's processes too).
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from shoal.launch.allocation import Allocation, Node

# the command line's flags: in a module of their own, read before this one is imported
from shoal.launch.flags import add_cluster_options, cluster_kwargs, given_allocation
from shoal.launch.launchers import Launch, Launcher, default_launcher, get_launcher
from shoal.launch.local import head_policy_args
from shoal.launch.workenv import WorkerEnv
from shoal.task.errors import ExecutorError
from shoal.transport.connfile import Connection, host_address

__all__ = ["AllocationCluster", "ClusterError", "ERROR_MARK", "add_cluster_options",
           "cluster_kwargs", "given_allocation", "interface_address", "node_main"]

ERROR_MARK = "shoal-node-error"   # a node's failure line: "shoal-node-error NODE: message"
JOIN_TIMEOUT = 60.0               # seconds every agent may take to join (slow starts at scale)
PROBE_TIMEOUT = 10.0              # seconds a node keeps trying to reach the head's port
# what the agents need of this environment where a launcher does not pass it on by itself
# (ssh, pbsdsh, mpirun): the import path, and the rerouting of `shoal env` (bundles)
FORWARDED = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH",
             "LD_LIBRARY_PATH", "SHOAL_BUNDLE_ROOT", "SHOAL_APP", "SHOAL_RUN_DIR")
_HARMLESS = "cluster configuration lacks support for cpu binding"


class ClusterError(ExecutorError):
    """The allocation's runtime could not start (no agent joined, bad interface, ...)."""


def interface_address(name: str) -> str:
    """The IPv4 address of network interface ``name`` (``--interface ib0``)."""
    import fcntl
    import struct

    try:
        socket.if_nametoindex(name)
    except OSError:
        have = ", ".join(n for _, n in socket.if_nameindex())
        raise ClusterError(f"--interface {name}: no such network interface here (have: {have})") from None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915,  # SIOCGIFADDR
                                 struct.pack("256s", name.encode()[:15]))
        except OSError:
            raise ClusterError(f"--interface {name}: the interface has no IPv4 address") from None
    return socket.inet_ntoa(packed[20:24])


def _free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def _run_dir() -> str:
    base = os.environ.get("SHOAL_RUN_DIR") or os.path.join(os.getcwd(), ".shoal")
    os.makedirs(base, mode=0o700, exist_ok=True)
    path = os.path.join(base, f"run-{socket.gethostname().split('.')[0]}-{os.getpid()}-"
                              f"{secrets.token_hex(3)}")
    os.mkdir(path, 0o700)
    return path


class JoinProbe(Protocol):
    """A client of the head that lists the agents joined so far (see ``AllocationCluster``)."""

    def agents(self) -> Sequence[Any]:
        """The agents connected now: each has ``name`` (its node) and ``slots``."""
        ...

    def close(self) -> None:
        """Disconnect, without stopping the head."""
        ...


def _short(name: str) -> str:
    return name.split(".")[0]


class AllocationCluster:
    """The head here and one agent per node of ``allocation``: what ``Executor()`` runs on
    inside a batch job. Same interface as ``LocalCluster`` (``connection``, ``slots``,
    ``watch_fds``, ``dead``, ``abort``, ``alive``, ``why``, ``stop``).

    :param allocation: the nodes (``shoal.launch.allocation.discover()``).
    :param launcher: a :class:`Launcher` or its name; default: the allocation kind's.
    :param interface: network interface whose address the head binds (default: this
        host's name resolved, else the default route's address).
    :param workers: warm Python workers per agent (default: one per slot; 0 for commands only).
    :param slots: at most this many cores per agent (default: each node's CPUs).
    :param join_timeout: seconds every agent may take to join.
    :param probe: ``probe(connection_file, timeout)`` opens a client of the head that lists
        the agents joined so far (the Executor passes one of its own kind).
    :param worker_env: each node's agent runs its prolog and takes its import path and
        directory (shoal.launch.workenv); a node whose prolog fails is named, as one that
        cannot reach the head.
    """

    def __init__(self, allocation: Allocation, launcher: Launcher | str | None = None, *,
                 interface: str | None = None, workers: int | None = None,
                 slots: int | None = None, prefetch: int = 1,
                 heartbeat_timeout: float | None = None, crash_limit: int | None = None,
                 journal: str | None = None, trace: str | None = None,
                 join_timeout: float = JOIN_TIMEOUT,
                 quiet: bool = False, probe: Callable[[str, float], JoinProbe],
                 worker_env: WorkerEnv | None = None) -> None:
        if not allocation.nodes:
            raise ClusterError(f"{allocation.kind} allocation from {allocation.source}: no nodes")
        if isinstance(launcher, str):
            launcher = get_launcher(launcher)
        self.launcher = launcher or default_launcher(allocation)
        self.launcher.check()
        self.allocation = allocation
        if slots is not None:  # a cap per node (cpus 0: counted on the node, so slots)
            nodes = tuple(Node(n.name, min(n.cpus, slots) if n.cpus else slots, n.gpus)
                          for n in allocation.nodes)
        else:
            nodes = allocation.nodes
        self.nodes = nodes
        self._quiet = quiet
        self._probe = probe
        if interface:
            addr, how = interface_address(interface), f"interface {interface}"
        else:
            addr, how = host_address()
        self.address_how = how
        port = _free_port(addr)
        import zmq

        encrypt = not addr.startswith("127.") and zmq.has("curve")
        self.rundir = _run_dir()
        self.connection = Connection.new(f"tcp://{addr}:{port}", encrypt=encrypt)
        self.connfile = os.path.join(self.rundir, "connection.json")
        self.connection.write(self.connfile)
        me = str(os.getpid())
        py = sys.executable
        policy = head_policy_args(heartbeat_timeout, crash_limit, journal, trace)
        # no --exit-when-idle: the join check below is a client of its own; the Executor
        # stops the head with SHUTDOWN, and the head watches this process (--owner-pid)
        self.head = subprocess.Popen(
            [py, "-m", "shoal.head", "--connection", self.connfile, "--owner-pid", me,
             "--prefetch", str(prefetch), "--quiet", "--remove-dir", *policy],
            start_new_session=True, close_fds=True, stdin=subprocess.DEVNULL)
        path = json.dumps([p for p in sys.path if p and os.path.isdir(p)] or [os.getcwd()])
        agent = [py, "-m", "shoal.launch.cluster", "--connection", self.connfile,
                 "--probe-timeout", repr(min(PROBE_TIMEOUT, join_timeout)), "--sys-path", path,
                 "--head-address-from", how, "--quiet"]
        if workers is not None:
            agent += ["--workers", str(workers)]
        if worker_env is not None:
            agent += worker_env.node_args()
        env = {k: os.environ[k] for k in FORWARDED if os.environ.get(k)}
        self.launches: list[Launch] = self.launcher.launches(nodes, agent, env)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.failed: dict[str, str] = {}       # node -> why its agent is not there
        self._lines: dict[int, list[str]] = {}  # launch index -> its stderr lines (not marks)
        self._lock = threading.Lock()
        self._stopped = False
        self._started = False  # until every agent joined or failed: launcher lines are held
        self._pidfds: dict[int, subprocess.Popen[bytes]] = {}
        self.slots = 0
        self.agents: dict[str, int] = {}       # node -> slots of its joined agent
        try:
            self._start_launches()
            self._wait_joined(join_timeout)
        except BaseException:
            self.abort()
            self._cleanup()
            raise
        for p in (self.head, *self.procs):
            try:
                self._pidfds[os.pidfd_open(p.pid)] = p
            except (AttributeError, OSError):
                pass

    # ---- start -------------------------------------------------------------------------
    def _start_launches(self) -> None:
        for i, launch in enumerate(self.launches):
            env = {**os.environ, **(launch.env or {})}
            try:
                p = subprocess.Popen(list(launch.argv), env=env, stdin=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, close_fds=True,
                                     start_new_session=True, preexec_fn=_die_with_parent)
            except OSError as exc:
                for n in launch.nodes:
                    self.failed[n.name] = f"{self.launcher.name} cannot start: {exc}"
                self.procs.append(_Exited())  # type: ignore[arg-type]
                continue
            self.procs.append(p)
            self._lines[i] = []
            threading.Thread(target=self._read_stderr, args=(i, p), daemon=True,
                             name=f"shoal-launch-{i}").start()

    def _read_stderr(self, i: int, p: subprocess.Popen[bytes]) -> None:
        assert p.stderr is not None
        for raw in p.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            if _HARMLESS in line:  # --cpu-bind=none where Slurm binds nothing anyway
                continue
            if line.startswith(ERROR_MARK + " "):
                node, _, why = line[len(ERROR_MARK) + 1:].partition(": ")
                with self._lock:
                    self.failed.setdefault(node, why)
                continue
            with self._lock:
                if not self._started:  # kept: a failed node's reason quotes them
                    self._lines[i].append(line)
                    continue
            if not self._quiet:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()

    def _wait_joined(self, timeout: float) -> None:
        want = {n.name for n in self.nodes}
        deadline = time.monotonic() + timeout
        try:
            probe = self._probe(self.connfile, max(5.0, timeout))
        except ExecutorError as exc:
            raise ClusterError(f"the head at {self.connection.address} did not start: {exc}") from None
        try:
            while True:
                if self.head.poll() is not None:
                    raise ClusterError(f"the head exited with status {self.head.returncode} "
                                       "while the agents were starting")
                joined = {}
                for a in probe.agents():
                    joined[a.name] = a.slots
                self.agents = {n: joined[n] for n in want if n in joined}
                # an agent named other than its node (a launcher gave it the host name):
                # matched by short name
                for n in want - set(self.agents):
                    hit = next((a for a in joined if _short(a) == _short(n)), None)
                    if hit is not None:
                        self.agents[n] = joined[hit]
                with self._lock:
                    for i, p in enumerate(self.procs):
                        if p.poll() is not None:  # the launcher ended: its nodes not joined failed
                            for node in self.launches[i].nodes:
                                if node.name not in self.agents and node.name not in self.failed:
                                    self.failed[node.name] = self._exit_why(i, p)
                    missing = want - set(self.agents) - set(self.failed)
                if not missing or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            for n in sorted(want - set(self.agents) - set(self.failed)):
                self.failed[n] = (f"its agent did not join within {timeout:.0f} s (started by "
                                  f"{self.launcher.name}; the head listens on "
                                  f"{self.connection.address}, found by {self.address_how})")
            for n in list(self.failed):
                if n in self.agents:  # it did join after all (e.g. a warning line)
                    del self.failed[n]
        finally:
            probe.close()
        self.slots = sum(self.agents.values())
        with self._lock:
            self._started = True
            held = [ln for i, launch in enumerate(self.launches)
                    if not any(n.name in self.failed for n in launch.nodes)
                    for ln in self._lines.get(i, [])]
        if held and not self._quiet:
            sys.stderr.write("".join(ln + "\n" for ln in held))
        for names, why in _by_reason(self.failed):
            print(f"shoal: {names}: {why}", file=sys.stderr, flush=True)
        if not self.agents:
            which = "the node" if len(self.nodes) == 1 else f"all {len(self.nodes)} nodes"
            raise ClusterError(f"no agent joined the head at {self.connection.address}: "
                               f"{which} failed (see above)")
        if self.failed:
            print(f"shoal: going on with {len(self.agents)} of {len(self.nodes)} nodes "
                  f"({self.slots} slots)", file=sys.stderr, flush=True)

    def _exit_why(self, i: int, p: subprocess.Popen[Any]) -> str:
        tail = [ln.strip() for ln in self._lines.get(i, [])
                if ln.strip() and "--help" not in ln]  # "Try 'srun --help'..." says nothing
        errors = [ln for ln in tail if "error" in ln.lower() or "invalid" in ln.lower()
                  or "unrecognized" in ln.lower()]
        said = f": {(errors or tail)[-1]}" if tail else ""
        fix = (" (check the host name and that `ssh -o BatchMode=yes HOST true` works)"
               if self.launcher.name == "ssh" else "")
        return (f"{self.launcher.name} exited with {_status(p.returncode)} before its agent "
                f"joined{said}{fix}")

    # ---- the LocalCluster interface ----------------------------------------------------------
    def watch_fds(self) -> list[int]:
        """File descriptors that become readable when the head or a launcher exits."""
        return list(self._pidfds)

    def dead(self) -> BaseException | None:
        """HeadLost if the head exited; ExecutorError once every launcher ended (no agent
        can be left); else None."""
        from shoal.task import errors  # errors.HeadLost: made on first use (a failure)
        from shoal.task.errors import ExecutorError

        rc = self.head.poll()
        if rc is not None:
            return errors.HeadLost(f"lost the head at {self.connection.address}: "
                            f"its process exited with {_status(rc)}")
        if self.procs and all(p.poll() is not None for p in self.procs):
            return ExecutorError(f"every agent of the {self.allocation.kind} allocation exited "
                                 f"({self.why()}): was the job cancelled, or past its time limit?")
        return None

    def alive(self) -> bool:
        return self.head.poll() is None and any(p.poll() is None for p in self.procs)

    def why(self) -> str:
        parts = []
        if self.head.poll() is not None:
            parts.append(f"head exited with {_status(self.head.returncode)}")
        for launch, p in zip(self.launches, self.procs, strict=False):
            if p.poll() is not None:
                parts.append(f"{launch.argv[0]} for {','.join(n.name for n in launch.nodes)} "
                             f"exited with {_status(p.returncode)}")
        return ", ".join(parts) or "unknown"

    def abort(self) -> None:
        """Kill the head and the launchers now (their agents are stopped by the launcher,
        or leave when they lose the head)."""
        if self.head.poll() is None:
            self.head.kill()
            self.head.wait()
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # srun/mpirun pass it to their tasks
        for p in self.procs:
            _wait_or_kill(p, 5.0)

    def stop(self, timeout: float = 5.0) -> None:
        """Wait for an orderly exit (the client already asked the head to shut down, and the
        head tells the agents): head first, then the launchers; what lingers is ended."""
        if self._stopped:
            return
        self._stopped = True
        deadline = time.monotonic() + timeout
        try:
            self.head.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.head.send_signal(signal.SIGTERM)
        _wait_or_kill(self.head, 2.0)
        for p in self.procs:
            try:
                p.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            _wait_or_kill(p, 5.0)
        self._cleanup()

    def _cleanup(self) -> None:
        for fd in self._pidfds:
            os.close(fd)
        self._pidfds = {}
        shutil.rmtree(self.rundir, ignore_errors=True)
        try:  # .shoal/ itself, when no other run uses it
            os.rmdir(os.path.dirname(self.rundir))
        except OSError:
            pass


def _by_reason(failed: Mapping[str, str]) -> list[tuple[str, str]]:
    """Failed nodes grouped by their reason: ``("node n9", why)``, ``("nodes n[1-4]", why)``
    (one line for a launch that failed for all its nodes, however many)."""
    import hostlist

    groups: dict[str, list[str]] = {}
    for node in sorted(failed):
        groups.setdefault(failed[node], []).append(node)
    out = []
    for why, names in groups.items():
        label = (f"node {names[0]}" if len(names) == 1
                 else f"nodes {hostlist.collect_hostlist(names)}")
        out.append((label, why))
    return sorted(out)


class _Exited:
    """Stands for a launcher command that could not be started at all."""

    pid = 0
    returncode = 127

    def poll(self) -> int:
        return 127

    def wait(self, timeout: float | None = None) -> int:
        return 127

    def send_signal(self, sig: int) -> None:
        pass

    def kill(self) -> None:
        pass


def _wait_or_kill(p: Any, timeout: float) -> None:
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _die_with_parent() -> None:
    """In the launcher's child: SIGTERM when this process dies (srun then cancels the
    agents' step), so a killed program leaves no launcher behind."""
    from shoal._sys import set_parent_death_signal

    set_parent_death_signal(signal.SIGTERM)


def _status(rc: int | None) -> str:
    if rc is None:
        return "no status"
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"status {rc}"


# ---- the node side ---------------------------------------------------------------------
def _node_name(given: str | None) -> str:
    return (given or os.environ.get("SLURMD_NODENAME") or os.environ.get("FLUX_NODE_NAME")
            or _short(socket.gethostname()))


def probe(address: str, timeout: float) -> str | None:
    """Try a TCP connection to the head's ``tcp://HOST:PORT`` until it succeeds (None) or
    ``timeout`` passes (the last error). A refused connection is retried (the head may not
    listen yet), and so are a silent drop and "no route to host" (a neighbour that does
    not answer yet); "network is unreachable" (no route at all here) is not going to
    change, and fails at once."""
    host, _, port = address.partition("://")[2].rpartition(":")
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=max(0.2, min(left, 3.0))):
                return None
        except OSError as exc:
            last = f"{exc.strerror or exc}" if not isinstance(exc, TimeoutError) else "timed out"
            if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
                pass
            elif not isinstance(exc, TimeoutError) and getattr(exc, "errno", None) != errno.EHOSTUNREACH:
                return last
        if time.monotonic() >= deadline:
            return last
        time.sleep(0.05)


def _unreachable(address: str, node: str, err: str, took: float, how: str | None) -> str:
    """The one-line reason of a node that cannot reach the head: the address, what the
    connection attempts said, how the head chose that address, and the fix."""
    host = address.partition("://")[2].rpartition(":")[0].strip("[]")
    tried = f"{err}, for {took:.0f} s" if took >= 1 else err
    why = f"cannot reach the head at {address} from {node} ({tried})"
    try:
        if ipaddress.ip_address(host).is_loopback:
            why += f"; {host} is a loopback address, reachable only on the head's own host"
    except ValueError:
        pass
    chose = (f"the head took that address from {how}" if how
             else "the head chose that address from its host name or default route")
    return (f"{why}; {chose}: give --interface NAME (an interface of the head's host that "
            "the nodes reach, e.g. ib0 or eth0)")


def node_main(argv: Sequence[str] | None = None) -> int:
    """``python -m shoal.launch.cluster --connection FILE [--node NAME] -- AGENT_ARGS``: what a
    launcher runs on each node; tests the way back to the head, then runs the agent."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m shoal.launch.cluster", allow_abbrev=False)
    ap.add_argument("--connection", required=True)
    ap.add_argument("--node", help="this node's name (default: SLURMD_NODENAME, else the host name)")
    ap.add_argument("--probe-timeout", type=float, default=PROBE_TIMEOUT)
    ap.add_argument("--head-address-from", metavar="HOW",
                    help="how the head chose its address (for the message when it is unreachable)")
    ap.add_argument("--sys-path", help="JSON list of import paths for the workers")
    ap.add_argument("--prolog", help="shell script whose environment the agent takes (workenv)")
    ap.add_argument("--pythonpath", action="append", default=[],
                    help="a directory put first on the workers' import path (repeatable)")
    ap.add_argument("--workdir", help="the directory the agent and its workers run in")
    ap.add_argument("--exit-zero", action="store_true",
                    help="exit 0 after reporting a failure (mpirun ends every rank otherwise)")
    # everything else (before or after a "--") is the agent's: --slots, --gpus, --workers
    args, rest = ap.parse_known_args([a for a in (sys.argv[1:] if argv is None else argv)
                                      if a != "--"])
    exit_zero = args.exit_zero
    node = _node_name(args.node)
    bad = 0 if exit_zero else 4

    def fail(why: str) -> int:
        print(f"{ERROR_MARK} {node}: {why}", file=sys.stderr, flush=True)
        return bad

    try:
        conn = Connection.read(args.connection)
    except (OSError, ValueError) as exc:
        return fail(f"cannot read the connection file {args.connection} ({exc}); the run "
                    "directory must be on a file system every node shares (set SHOAL_RUN_DIR)")
    if conn.address.startswith("tcp://"):
        t0 = time.monotonic()
        err = probe(conn.address, args.probe_timeout)
        if err is not None:
            return fail(_unreachable(conn.address, node, err, time.monotonic() - t0,
                                     args.head_address_from))
    sys_path = args.sys_path
    wenv = WorkerEnv.make(args.prolog, args.pythonpath or None, args.workdir)
    if wenv is not None:
        from shoal.launch.workenv import PrologError, apply_environment

        try:
            if wenv.workdir is not None:
                os.chdir(wenv.workdir)
            apply_environment(wenv.environment(os.environ, node))
        except OSError as exc:
            return fail(f"cannot change to the directory {wenv.workdir}: {exc.strerror}")
        except PrologError as exc:
            return fail(str(exc))
        sys_path = json.dumps(wenv.sys_path(json.loads(sys_path) if sys_path else []))
    # tasks of this agent that make an Executor() get the local default, not the allocation
    os.environ["SHOAL_NODE"] = node
    from shoal.agent.__main__ import main as agent_main

    extra = ["--sys-path", sys_path] if sys_path else []
    return agent_main(["--connection", args.connection, "--name", node, *extra, *rest])


if __name__ == "__main__":
    sys.exit(node_main())
