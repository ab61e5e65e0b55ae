"""Agents on nodes with their own network: real network namespaces on one bridge.

The test makes its own namespaces (``shoal-t-<pid>-<i>``), each joined by a veth pair to
a bridge of its own (``shbr<pid>``, the host side, ``10.252.X.1/24``), with no route out:
from inside, only that subnet is reachable, as on a cluster whose nodes see the head on
one network only. ``NetnsLauncher`` starts a node's agent exactly as the local launcher
does (``python -m shoal.launch.cluster ... --node NAME --slots N``), behind ``ip netns
exec NS``. Checked:

- the head on an address a node cannot reach (its default: the host's default route;
  or loopback): that node fails within seconds with one line naming it, the address
  tried and ``--interface``; the run goes on with the other node's agent, or fails
  clearly when no agent joined;
- ``interface=`` the bridge (the fix the line names): the namespaced agents join and
  run tasks, which really run inside their namespaces.

10.252.0.0/16, not 10.251: the failure tests (tests/failures/harness.py) use /30s all
over 10.251.0.0/16, and the test bed's node1..3 use 10.250.0.0/24 (bridge tbbr0).
Needs root and ``ip netns``; skipped otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence

import pytest

from shoal.launch import launchers as L
from shoal.launch.allocation import Allocation, Node


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def _netns_usable() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if r.returncode:
        return f"`ip netns` unavailable: {r.stderr.strip()}"
    return None


class Net:
    """A bridge on the host and ``count`` namespaces plugged into it."""

    def __init__(self, count: int) -> None:
        pid = os.getpid()
        self.bridge = f"shbr{pid}"[:15]
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        x = next(x for k in range(250) if f" 10.252.{(x := (pid + k) % 250)}." not in used)
        self.subnet = f"10.252.{x}"
        self.host_ip = f"{self.subnet}.1"
        self.names = [f"shoal-t-{pid}-{i}" for i in range(1, count + 1)]
        self.ips = {ns: f"{self.subnet}.{10 + i}" for i, ns in enumerate(self.names, 1)}
        self._links: list[str] = []
        self._spaces: list[str] = []
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._links.append(self.bridge)
            _ip("addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, ns in enumerate(self.names, 1):
                veth = f"shv{pid}-{i}"[:15]
                _ip("netns", "add", ns)
                self._spaces.append(ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                self._links.insert(0, veth)
                _ip("link", "set", veth, "master", self.bridge)
                _ip("link", "set", veth, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{self.ips[ns]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise

    def pids(self, ns: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def inode(self, ns: str) -> int:
        """The namespace's identity, as ``/proc/self/ns/net`` shows it to a process inside."""
        return os.stat(f"/run/netns/{ns}").st_ino

    def close(self) -> None:
        for ns in self._spaces:  # what still runs in them was started by this test
            for pid in self.pids(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self._links:  # a veth goes with its namespace's end; make sure
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self._spaces, self._links = [], []


@pytest.fixture
def net() -> Iterator[Net]:
    why = _netns_usable()
    if why:
        pytest.skip(why)
    n = Net(2)
    try:
        yield n
    finally:
        n.close()
    assert not any(ns in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                        text=True).stdout for ns in n.names)


class NetnsLauncher(L.LocalLauncher):
    """The local launcher, but the agents of the nodes in ``spaces`` (node name ->
    namespace) start inside that namespace: ``ip netns exec NS <the same command>``
    (``ip netns exec`` execs, so the launcher's process is the agent's)."""

    name = "netns"

    def __init__(self, spaces: Mapping[str, str]) -> None:
        self.spaces = dict(spaces)

    def launches(self, nodes: Sequence[Node], agent: Sequence[str],
                 env: Mapping[str, str] | None = None) -> list[L.Launch]:
        out = []
        for launch in super().launches(nodes, agent, env):
            ns = self.spaces.get(launch.nodes[0].name)
            argv = ("ip", "netns", "exec", ns, *launch.argv) if ns else launch.argv
            out.append(L.Launch(launch.nodes, argv, launch.env))
        return out


def _netns_of_task(_: int) -> int:
    """In a worker: the inode of its network namespace (``/proc/self/ns/net``)."""
    time.sleep(0.05)  # long enough that both agents get some of the map
    return os.stat("/proc/self/ns/net").st_ino


def _reports(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("shoal: ")]


@pytest.mark.parametrize("interface", [None, "lo"], ids=["default-route", "loopback"])
def test_head_unreachable_from_a_node(net, tmp_path, monkeypatch, capfd, interface) -> None:
    """The head on an address the namespaced node has no way to: its own default (this
    host's default-route address; the namespace has no route there) or loopback
    (``--interface lo``: refused inside the namespace). That node is reported in one line
    within seconds, the agent on this host joins, and tasks run on it."""
    from shoal import Executor
    from shoal.launch.cluster import PROBE_TIMEOUT, AllocationCluster

    monkeypatch.chdir(tmp_path)
    ns = net.names[0]
    alloc = Allocation("hosts", (Node("localhost", 2), Node(ns, 2)))
    t0 = time.monotonic()
    with Executor(allocation=alloc, launcher=NetnsLauncher({ns: ns}), interface=interface) as ex:
        took = time.monotonic() - t0
        cluster = ex._cluster
        assert isinstance(cluster, AllocationCluster)
        address = cluster.connection.address
        if address.startswith(f"tcp://{net.subnet}."):
            pytest.skip(f"this host's default address {address} is on the test's own subnet")
        assert [a.name for a in ex.agents()] == ["localhost"] and ex.slots == 2
        assert sorted(ex.map(abs, range(-5, 0))) == [1, 2, 3, 4, 5]
    [line, going_on] = _reports(capfd.readouterr().err)
    with capfd.disabled():  # the measured time, for `pytest -s`
        print(f"\n[netns] head on {address} ({cluster.address_how}): node {ns} reported "
              f"after {took:.2f} s:\n  {line}")
    assert going_on == "shoal: going on with 1 of 2 nodes (2 slots)"
    assert line.startswith(f"shoal: node {ns}: cannot reach the head at {address} from {ns} ")
    assert "--interface" in line
    if interface == "lo":  # refused: retried while the head may still be starting
        assert "Connection refused" in line and "loopback" in line
        assert took < PROBE_TIMEOUT + 5
    else:  # no route at all: that does not change by waiting
        assert "Network is unreachable" in line and "default route" in line
        assert took < 5
    assert not net.pids(ns)


def test_no_node_reaches_the_head(net, tmp_path, monkeypatch, capfd) -> None:
    """Every node in a namespace, the head on its default address: a ClusterError within
    seconds, one line per node, and nothing left running."""
    from shoal import Executor
    from shoal.launch.cluster import ClusterError

    monkeypatch.chdir(tmp_path)
    alloc = Allocation("hosts", tuple(Node(ns, 1) for ns in net.names))
    t0 = time.monotonic()
    with pytest.raises(ClusterError, match=r"no agent joined the head at tcp://\S+: all 2 nodes "
                                           r"failed \(see above\)") as info:
        Executor(allocation=alloc, launcher=NetnsLauncher({ns: ns for ns in net.names}))
    took = time.monotonic() - t0
    address = re.search(r"tcp://\S+(?=:)", str(info.value))
    assert address is not None
    if address.group().startswith(f"tcp://{net.subnet}."):
        pytest.skip("this host's default address is on the test's own subnet")
    lines = _reports(capfd.readouterr().err)
    with capfd.disabled():
        print(f"\n[netns] no node reaches {address.group()}: ClusterError after {took:.2f} s:"
              f"\n  {info.value}")
    assert [ln.split(": ")[1] for ln in lines] == [f"node {ns}" for ns in net.names]
    assert all("--interface" in ln and address.group() in ln for ln in lines), lines
    assert took < 5
    assert not any(net.pids(ns) for ns in net.names)
    assert not (tmp_path / ".shoal").exists()


def test_interface_lets_the_nodes_join(net, tmp_path, monkeypatch) -> None:
    """The fix: ``interface=`` the bridge. The head listens on the bridge's address, both
    namespaced agents and the one on this host join, and 20 tasks run, some of them
    inside each namespace (their own /proc/self/ns/net says so)."""
    from shoal import Executor

    monkeypatch.chdir(tmp_path)
    alloc = Allocation("hosts", (Node("localhost", 1), *(Node(ns, 1) for ns in net.names)))
    spaces = {ns: ns for ns in net.names}
    t0 = time.monotonic()
    with Executor(allocation=alloc, launcher=NetnsLauncher(spaces), interface=net.bridge) as ex:
        took = time.monotonic() - t0
        address = ex._cluster.connection.address
        assert address.startswith(f"tcp://{net.host_ip}:")
        assert sorted(a.name for a in ex.agents()) == sorted(["localhost", *net.names])
        futures = [ex.submit(_netns_of_task, i) for i in range(20)]
        where = [(f.result(timeout=30), f.agent) for f in futures]
    print(f"\n[netns] --interface {net.bridge}: 3 agents joined {address} in {took:.2f} s")
    here = os.stat("/proc/self/ns/net").st_ino
    expect = {"localhost": here, **{ns: net.inode(ns) for ns in net.names}}
    assert all(inode == expect[agent] for inode, agent in where), where
    ran = {agent for _, agent in where}
    assert set(net.names) <= ran, where
    assert not any(net.pids(ns) for ns in net.names)
