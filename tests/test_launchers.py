"""The command lines each launcher builds, the node-side self-test, hostfile parsing."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time

import pytest

from shoal.launch import launchers as L
from shoal.launch.allocation import Allocation, AllocationError, Node
from shoal.launch.cluster import ERROR_MARK, given_allocation, interface_address, probe
from shoal.transport.connfile import Connection

AGENT = ["py", "-m", "shoal.launch.cluster", "--connection", "/run/c.json"]
FOUR = (Node("n1", 4), Node("n2", 4), Node("n3", 4), Node("n4", 4))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_srun_one_step_for_like_nodes() -> None:
    [launch] = L.SrunLauncher().launches(FOUR, AGENT)
    assert launch.nodes == FOUR
    assert list(launch.argv) == [
        "srun", "--overlap", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1",
        "--cpus-per-task=4", "--cpu-bind=none", "--kill-on-bad-exit=0",
        "--job-name=shoal-agents", "--nodelist=n1,n2,n3,n4", *AGENT, "--slots", "4"]


def test_srun_groups_unlike_nodes_and_passes_gpus() -> None:
    nodes = (Node("a1", 8, ("0", "1")), Node("a2", 4), Node("a3", 8, ("0", "1")))
    first, second = L.SrunLauncher(extra=["--mpi=none"]).launches(nodes, AGENT, {"PYTHONPATH": "/x"})
    assert first.nodes == (nodes[0], nodes[2])
    assert "--nodelist=a1,a3" in first.argv and "--cpus-per-task=8" in first.argv
    assert "--gpus-per-node=2" in first.argv
    assert list(first.argv[-4:]) == ["--slots", "8", "--gpus", "0,1"]
    assert first.argv[first.argv.index("--mpi=none") + 1:][:len(AGENT)] == tuple(AGENT)
    assert second.nodes == (nodes[1],)
    assert "--nodes=1" in second.argv and list(second.argv[-2:]) == ["--slots", "4"]
    assert not any(a.startswith("--gpus-per-node") for a in second.argv)
    assert first.env == {"PYTHONPATH": "/x"}


def test_mpirun_openmpi_one_rank_per_host() -> None:
    [launch] = L.MpirunLauncher(flavor="openmpi").launches(FOUR[:2], AGENT, {"PYTHONPATH": "/x"})
    assert list(launch.argv) == [
        "mpirun", "-n", "2", "-H", "n1:1,n2:1", "--map-by", "ppr:1:node", "--bind-to", "none",
        "-x", "PYTHONPATH", *AGENT, "--exit-zero", "--slots", "4"]
    assert launch.env is not None and launch.env["PYTHONPATH"] == "/x"


def test_mpiexec_mpich_flavor() -> None:
    [launch] = L.MpirunLauncher("mpiexec", flavor="mpich").launches(FOUR[:2], AGENT, {"A": "1"})
    assert list(launch.argv) == ["mpiexec", "-n", "2", "-hosts", "n1,n2", "-ppn", "1",
                                 "-genvlist", "A", *AGENT, "--exit-zero", "--slots", "4"]


def test_mpi_flavor_of_the_installed_mpirun() -> None:
    if not L.shutil.which("mpirun"):
        pytest.skip("no mpirun here")
    assert L.mpi_flavor("mpirun") == "openmpi"  # this machine has OpenMPI 4.1


def test_pbsdsh_whole_job_or_per_host() -> None:
    [launch] = L.PbsdshLauncher().launches(FOUR, AGENT, {"PYTHONPATH": "/x"})
    assert list(launch.argv) == ["pbsdsh", "-u", "--", "env", "PYTHONPATH=/x", *AGENT,
                                 "--slots", "4"]
    mixed = (Node("h1", 4), Node("h2", 2))
    per = L.PbsdshLauncher().launches(mixed, AGENT)
    assert [list(p.argv) for p in per] == [
        ["pbsdsh", "-h", "h1", "--", *AGENT, "--node", "h1", "--slots", "4"],
        ["pbsdsh", "-h", "h2", "--", *AGENT, "--node", "h2", "--slots", "2"]]


def test_ssh_one_per_node_batch_mode() -> None:
    launches = L.SshLauncher().launches(FOUR[:2], AGENT, {"PYTHONPATH": "/a b"})
    assert [p.nodes for p in launches] == [(FOUR[0],), (FOUR[1],)]
    argv = list(launches[1].argv)
    assert argv[:7] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-T", "n2"]
    assert argv[7] == (f"cd {shlex.quote(os.getcwd())} && exec env 'PYTHONPATH=/a b' "
                       f"{shlex.join(AGENT)} --node n2 --slots 4")


def test_local_runs_the_agent_itself() -> None:
    [launch] = L.LocalLauncher().launches((Node("here", 3, ("3",)),), AGENT)
    assert list(launch.argv) == [*AGENT, "--node", "here", "--slots", "3", "--gpus", "3,"]
    from shoal.agent.resources import parse_gpus

    assert parse_gpus(launch.argv[-1]) == ("3",)  # the agent reads it as device 3


def test_choice_by_allocation_kind_and_by_name() -> None:
    assert isinstance(L.default_launcher(Allocation("slurm", FOUR)), L.SrunLauncher)
    assert isinstance(L.default_launcher(Allocation("lsf", FOUR)), (L.SshLauncher, L.MpirunLauncher))
    local = Allocation("hostfile", (Node("localhost", 2),))
    assert isinstance(L.default_launcher(local), L.LocalLauncher)
    assert isinstance(L.default_launcher(given_allocation(hosts="localhost:2")), L.LocalLauncher)
    assert isinstance(L.get_launcher("mpiexec"), L.MpirunLauncher)
    assert L.get_launcher("mpiexec").program == "mpiexec"
    with pytest.raises(L.LauncherError, match="unknown launcher 'qrsh'.*srun"):
        L.get_launcher("qrsh")


def test_hosts_and_hostfile(tmp_path) -> None:
    alloc = given_allocation(hosts="h1:4,h2:2")
    assert alloc is not None and alloc.nodes == (Node("h1", 4), Node("h2", 2))
    f = tmp_path / "hosts"
    f.write_text("# nodes\nh1 4\nh2 slots=8\n\nh3\n")
    alloc = given_allocation(hostfile=str(f))
    assert alloc is not None and [(n.name, n.cpus) for n in alloc.nodes] == [("h1", 4), ("h2", 8), ("h3", 0)]
    # a host without a count: its agent counts the cores there (no --slots)
    [h3] = L.SshLauncher().launches(alloc.nodes[2:], AGENT)
    assert h3.argv[-1].endswith("--node h3")
    [h3] = L.SrunLauncher().launches(alloc.nodes[2:], AGENT)
    assert not any(a.startswith("--cpus-per-task") for a in h3.argv) and "--slots" not in h3.argv
    f.write_text("h1 4\nh2 four cores\n")
    with pytest.raises(AllocationError, match=r"hosts:2"):
        given_allocation(hostfile=str(f))
    assert given_allocation() is None


def test_interface_address() -> None:
    assert interface_address("lo") == "127.0.0.1"
    with pytest.raises(RuntimeError, match="--interface nosuch0: no such network interface"):
        interface_address("nosuch0")


def test_probe_refused_then_listening() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        t0 = time.monotonic()
        assert probe(f"tcp://127.0.0.1:{port}", 0.3) is not None  # bound, not listening: refused
        assert time.monotonic() - t0 < 2
        s.listen()
        assert probe(f"tcp://127.0.0.1:{port}", 1.0) is None


def test_node_cannot_reach_the_head_says_so_in_one_line(tmp_path) -> None:
    """The node side of the self-test: a head address nothing listens on gives one marked
    line naming the node, the address and the fix, within the probe time."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        path = tmp_path / "c.json"
        Connection.new(f"tcp://127.0.0.1:{port}").write(str(path))
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "shoal.launch.cluster", "--connection", str(path),
                            "--node", "nodeX", "--probe-timeout", "1", "--slots", "2"],
                           capture_output=True, text=True, timeout=30,
                           env={**os.environ, "PYTHONPATH": ROOT})
    took = time.monotonic() - t0
    assert r.returncode == 4, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"{ERROR_MARK} nodeX: cannot reach the head at tcp://127.0.0.1:{port}")
    assert "--interface" in lines[0] and "refused" in lines[0].lower()
    assert took < 10


def test_node_without_the_connection_file(tmp_path) -> None:
    r = subprocess.run([sys.executable, "-m", "shoal.launch.cluster", "--connection",
                        str(tmp_path / "gone.json"), "--node", "nodeY", "--exit-zero"],
                       capture_output=True, text=True, timeout=30,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0  # --exit-zero: under mpirun, the other agents stay
    assert r.stderr.startswith(f"{ERROR_MARK} nodeY: cannot read the connection file")
    assert "SHOAL_RUN_DIR" in r.stderr


def test_executor_over_a_hostfile_of_this_host(tmp_path, monkeypatch) -> None:
    """The cluster path without a batch system: a hostfile naming only this host starts
    its agent with the local launcher; --interface picks the head's address; everything
    started is gone after shutdown."""
    from shoal import Executor
    from shoal.launch.cluster import AllocationCluster

    monkeypatch.chdir(tmp_path)
    alloc = given_allocation(hosts="localhost:3")
    with Executor(allocation=alloc, interface="lo") as ex:
        cluster = ex._cluster
        assert isinstance(cluster, AllocationCluster)
        assert isinstance(cluster.launcher, L.LocalLauncher)
        assert cluster.connection.address.startswith("tcp://127.0.0.1:")
        assert ex.slots == 3
        assert [a.name for a in ex.agents()] == ["localhost"]
        assert sorted(ex.map(abs, [-1, -2, -3])) == [1, 2, 3]
        pids = [cluster.head.pid, *(p.pid for p in cluster.procs)]
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert not (tmp_path / ".shoal").exists()


def test_launcher_without_an_allocation_is_a_clear_error() -> None:
    from shoal import Executor, ExecutorError

    env_has_job = os.environ.get("SLURM_JOB_ID")
    if env_has_job:
        pytest.skip("runs inside a Slurm job")
    with pytest.raises(ExecutorError, match="launcher= and interface= need an allocation"):
        Executor(launcher="srun")


class _OneBadNode(L.LocalLauncher):
    """Local agents, but node "bad" is pointed at a connection file that is not there: a
    real node-side failure, reported through the launcher's stderr."""

    def launches(self, nodes, agent, env=None):
        out = []
        for launch in super().launches(nodes, agent, env):
            argv = list(launch.argv)
            if launch.nodes[0].name == "bad":
                argv[argv.index("--connection") + 1] = "/nonexistent/connection.json"
            out.append(L.Launch(launch.nodes, tuple(argv), launch.env))
        return out


def test_a_failed_node_is_named_and_the_others_run(tmp_path, monkeypatch, capfd) -> None:
    from shoal import Executor

    monkeypatch.chdir(tmp_path)
    alloc = Allocation("hosts", (Node("good", 2), Node("bad", 2)))
    t0 = time.monotonic()
    with Executor(allocation=alloc, launcher=_OneBadNode(), interface="lo") as ex:
        took = time.monotonic() - t0
        assert ex.slots == 2 and [a.name for a in ex.agents()] == ["good"]
        assert ex.submit(abs, -4).result() == 4
    err = capfd.readouterr().err.splitlines()
    assert took < 10
    assert [ln for ln in err if ln.startswith("shoal: ")] == [
        "shoal: node bad: cannot read the connection file /nonexistent/connection.json "
        "(connection file '/nonexistent/connection.json' does not exist); the run directory "
        "must be on a file system every node shares (set SHOAL_RUN_DIR)",
        "shoal: going on with 1 of 2 nodes (2 slots)"], err


def test_shoal_run_with_hosts(tmp_path) -> None:
    (tmp_path / "tasks.txt").write_text("echo one\necho two\n")
    r = subprocess.run([sys.executable, "-m", "shoal", "run", "--no-summary", "--hosts",
                        "localhost:2", "tasks.txt"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == ["one", "two"]
    r = subprocess.run([sys.executable, "-m", "shoal", "run", "--hosts", "h1:x", "tasks.txt"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 2 and r.stderr.startswith("shoal run: --hosts 'h1:x'"), r.stderr


def test_gpu_ids_reach_the_agent(tmp_path, monkeypatch) -> None:
    """A node with GPU ids in the allocation: its agent is told them (--gpus 2,5) and
    offers exactly those to the head."""
    from shoal import Executor
    from shoal.transport import protocol as P

    monkeypatch.chdir(tmp_path)
    alloc = Allocation("hosts", (Node("localhost", 2, ("2", "5")),))
    with Executor(allocation=alloc) as ex:
        [agent] = ex._request([P.AGENTS], 10.0)[0]  # the head's view, with resources
        assert agent["name"] == "localhost" and agent["slots"] == 2 and agent["gpus"] == 2
