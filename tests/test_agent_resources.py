"""An agent's resources, with a real head and real agent processes: GPU devices per task,
cores bound and OMP_NUM_THREADS, MPI tasks on one node, HELLO's capacity, --idle-timeout,
and bad flags.

Tasks with resources are sent as raw task specs (the wire protocol's opts), so these tests
do not depend on the client's API for them.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import time
from collections import Counter
from typing import Any

import pytest

from shoal import Command, Executor
from shoal.agent import resources
from shoal.task.codec import Encoder
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection

from .conftest import PY
from .test_journal import RawClient

MY_CPUS = sorted(os.sched_getaffinity(0))


class Client(RawClient):
    """RawClient plus raw command and Python specs with opts."""

    def __init__(self, connfile) -> None:
        super().__init__(Connection.read(str(connfile)))
        self.enc = Encoder(self.welcome["origin"])

    def cmd(self, shell: str, cores: int = 1, opts: dict[str, Any] | None = None,
            place: list[Any] | None = None, env: dict[str, str] | None = None) -> list[Any]:
        self.seq += 1
        payload: dict[str, Any] = {"argv": ["/bin/sh", "-c", shell]}
        if env:
            payload["env"] = env
        return [self.origin | self.seq, P.CMD, 0, payload, [], cores, -1, place, opts]

    def py(self, fn, *args: Any, opts: dict[str, Any] | None = None) -> list[Any]:
        return [*self.enc.call(fn, args, {}, [], 1), None, opts]

    def run(self, specs: list[list[Any]], timeout: float = 60) -> list[list[Any]]:
        funcs, names = self.enc.take_funcs_and_names()
        self.send([P.SUBMIT, specs, funcs, 0, names])
        deadline = time.monotonic() + timeout
        tids = [s[0] for s in specs]
        while not all(t in self.results for t in tids):
            self.recv(P.RESULTS, max(0.1, deadline - time.monotonic()))
        return [self.results[t] for t in tids]


def stdout(item: list[Any]) -> str:
    assert item[1] == P.OK, item
    return pickle.loads(item[2]).stdout.decode()


@pytest.fixture
def client_of(head):
    made: list[Client] = []

    def make() -> Client:
        c = Client(head[0])
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def _windows(items: list[list[Any]]) -> list[tuple[str, float, float, str]]:
    out = []
    for item in items:
        lines = stdout(item).split()
        # CUDA ROCR HIP ZE start end
        assert len(set(lines[:4])) == 1, lines  # every vendor's variable names the same device
        out.append((lines[0], float(lines[4]), float(lines[5]), item[0]))
    return out


GPU_CMD = ('echo "$CUDA_VISIBLE_DEVICES $ROCR_VISIBLE_DEVICES $HIP_VISIBLE_DEVICES '
           '$ZE_AFFINITY_MASK"; date +%s.%N; sleep 0.5; date +%s.%N')


def test_gpu_commands_each_see_one_device_never_shared(head, client_of):
    """8 one-GPU commands on an agent with 8 slots and 4 GPUs: the agent holds what the
    head sends beyond its free devices; no two running commands share a device."""
    connfile, _, add_agent = head
    agent = add_agent("--slots", "8", "--gpus", "4")
    c = client_of()
    t0 = time.monotonic()
    items = c.run([c.cmd(GPU_CMD, opts={"gpus": 1}) for _ in range(8)])
    elapsed = time.monotonic() - t0
    wins = _windows(items)
    assert {dev for dev, *_ in wins} <= {"0", "1", "2", "3"}
    assert all("," not in dev and dev for dev, *_ in wins)
    for i, (d1, s1, e1, _) in enumerate(wins):
        for d2, s2, e2, _ in wins[i + 1:]:
            if s1 < e2 and s2 < e1:  # ran at the same time
                assert d1 != d2, wins
    assert Counter(dev for dev, *_ in wins).most_common(1)[0][1] >= 2  # a device was reused
    assert elapsed >= 1.0  # two waves: 4 devices for 8 tasks of 0.5 s
    assert agent.poll() is None


def test_gpu_ids_and_two_gpu_task(head, client_of):
    """``--gpus 5,7``: the tasks get those ids; a 2-GPU task gets both, a 3-GPU one fails."""
    connfile, _, add_agent = head
    add_agent("--slots", "4", "--gpus", "5,7")
    c = client_of()
    both, one, three = c.run([c.cmd(GPU_CMD, opts={"gpus": 2}), c.cmd(GPU_CMD, opts={"gpus": 1}),
                              c.cmd("true", opts={"gpus": 3})])
    assert stdout(both).split()[0] == "5,7"
    assert stdout(one).split()[0] in ("5", "7")
    assert three[1] == P.ERR and b"asks for 3 GPUs" in three[2] and b"has 2" in three[2]
    # a task without GPUs keeps the agent's own environment (none set here)
    plain = c.run([c.cmd('echo "[$CUDA_VISIBLE_DEVICES]"')])[0]
    assert stdout(plain).strip() == f"[{os.environ.get('CUDA_VISIBLE_DEVICES', '')}]"


def _gpu_probe(dt: float) -> tuple[str, int, float, float]:
    t = time.time()
    time.sleep(dt)
    return os.environ.get("CUDA_VISIBLE_DEVICES", ""), os.getpid(), t, time.time()


def test_gpu_python_tasks(head, client_of):
    """Python tasks with a GPU each: one device in the worker's environment, never shared
    while running, and a worker keeps the device it was first given."""
    connfile, _, add_agent = head
    add_agent("--slots", "4", "--workers", "4", "--gpus", "2")
    c = client_of()
    items = c.run([c.py(_gpu_probe, 0.3, opts={"gpus": 1}) for _ in range(6)])
    got = []
    for item in items:
        assert item[1] == P.OK, item
        got.append(pickle.loads(item[2]))
    assert {dev for dev, *_ in got} <= {"0", "1"}
    for i, (d1, _, s1, e1) in enumerate(got):
        for d2, _, s2, e2 in got[i + 1:]:
            if s1 < e2 and s2 < e1:
                assert d1 != d2, got
    devices_of: dict[int, set[str]] = {}
    for dev, pid, _, _ in got:
        devices_of.setdefault(pid, set()).add(dev)
    assert all(len(d) == 1 for d in devices_of.values()), devices_of


CPUS_CMD = "grep Cpus_allowed_list /proc/self/status | cut -f2; echo $OMP_NUM_THREADS"


def test_multicore_command_bound_with_omp(head, client_of):
    """A 2-core command on an agent whose slots fit its CPUs: bound to 2 CPUs of the agent's
    set, OMP_NUM_THREADS=2 (unless the task sets its own); one-core ones untouched."""
    if len(MY_CPUS) < 2:
        pytest.skip("needs 2 CPUs")
    connfile, _, add_agent = head
    add_agent("--slots", "2")
    c = client_of()
    two, own, one = c.run([c.cmd(CPUS_CMD, cores=2), c.cmd(CPUS_CMD, cores=2,
                                                          env={"OMP_NUM_THREADS": "7"}),
                           c.cmd(CPUS_CMD)])
    cpus, omp = stdout(two).split()
    assert cpus == resources._ranges(MY_CPUS[:2]) and omp == "2"
    assert stdout(own).split()[1] == "7"
    assert stdout(one).split() == [resources._ranges(MY_CPUS)]  # no OMP_NUM_THREADS


@pytest.mark.skipif(len(MY_CPUS) < 4, reason="disjoint 2-CPU sets need 4 CPUs")
def test_two_multicore_commands_get_disjoint_cpus(head, client_of):
    connfile, _, add_agent = head
    add_agent("--slots", "4")
    c = client_of()
    a, b = c.run([c.cmd(CPUS_CMD + "; sleep 0.5", cores=2) for _ in range(2)])
    sa, sb = stdout(a).split()[0], stdout(b).split()[0]
    assert {sa, sb} == {resources._ranges(MY_CPUS[:2]), resources._ranges(MY_CPUS[2:4])}


@pytest.mark.skipif(len(MY_CPUS) >= 4, reason="binding applies: 4 slots fit this machine")
def test_no_binding_when_slots_exceed_cpus(head, client_of):
    """4 slots on fewer CPUs cannot bind distinct CPUs: OMP_NUM_THREADS only, said once."""
    connfile, _, add_agent = head
    agent = add_agent("--slots", "4")
    c = client_of()
    items = c.run([c.cmd(CPUS_CMD, cores=2) for _ in range(3)])
    for item in items:
        assert stdout(item).split() == [resources._ranges(MY_CPUS), "2"]
    agent.send_signal(signal.SIGTERM)
    err = agent.communicate(timeout=20)[1]
    assert err.count("not bound to cores") == 1, err


def test_hello_capacity(head):
    """What the agent says in HELLO: GPUs, memory, node (its log line says the same)."""
    connfile, _, add_agent = head
    agent = add_agent("--slots", "3", "--gpus", "0,2", "--memory", "3GiB", "--name", "cap")
    with Executor(connect=str(connfile)) as ex:
        deadline = time.monotonic() + 30
        while not ex.agents() and time.monotonic() < deadline:
            time.sleep(0.05)
        info = ex.agents()[0]
        assert info.slots == 3
        if hasattr(info, "gpus"):  # exposed by the client once the head passes them on
            assert (info.gpus, info.memory, info.node) == (2, 3 << 30, resources.node_name())
    agent.send_signal(signal.SIGTERM)
    err = agent.communicate(timeout=20)[1]
    assert (f"node {resources.node_name()}: 3 slots, 2 GPUs (0,2, from --gpus), 3072 MiB"
            in err), err


def test_idle_timeout_leaves_by_itself(head):
    """--idle-timeout 1: a task longer than that runs to its end, then the agent leaves
    (drain, BYE) with exit status 0."""
    connfile, _, add_agent = head
    agent = add_agent("--slots", "1", "--idle-timeout", "1")
    with Executor(connect=str(connfile)) as ex:
        r = ex.submit(Command(["sleep", "1.6"])).result(30)
        assert r.returncode == 0
        done = time.monotonic()
        assert agent.wait(15) == 0
        left_after = time.monotonic() - done
    assert left_after < 4.0
    err = agent.stderr.read()
    assert "idle for" in err and "drained" in err, err


def test_bad_resource_flags():
    for flags, what in ((["--gpus", "-1"], "--gpus -1: must be 0 or more GPUs"),
                        (["--gpus", "x"], "--gpus 'x': expected a GPU count"),
                        (["--slots", "-1"], "--slots must be at least 1"),
                        (["--memory", "lots"], "lots"),
                        (["--idle-timeout", "0"], "--idle-timeout 0: must be more than 0")):
        r = subprocess.run([PY, "-m", "shoal", "agent", "--connect", "/nonexistent.json", *flags],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and what in r.stderr and len(r.stderr.splitlines()) == 1, \
            (flags, r.stderr)


def test_parse_and_detect_gpus():
    assert resources.parse_gpus("3") == ("0", "1", "2")
    assert resources.parse_gpus("0") == ()
    assert resources.parse_gpus("5,") == ("5",)
    assert resources.parse_gpus("0,2,5") == ("0", "2", "5")
    with pytest.raises(ValueError, match="named twice"):
        resources.parse_gpus("1,1")
    assert resources.detect_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == (("2", "3"),
                                                                      "CUDA_VISIBLE_DEVICES")
    assert resources.detect_gpus({"SLURM_JOB_GPUS": "1"}) == (("1",), "SLURM_JOB_GPUS")
    assert resources.detect_gpus({"CUDA_VISIBLE_DEVICES": ""})[0] == ()
    cap = resources.capacity(env={"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]",
                                  "SLURM_JOB_CPUS_PER_NODE": "4(x2)", "SLURMD_NODENAME": "n2",
                                  "SLURM_MEM_PER_NODE": "2048", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert (cap.slots, cap.gpus, cap.memory, cap.node) == (4, ("0", "1"), 2048 << 20, "n2")


def test_bound_spawn_binds_only_the_child():
    cpu = MY_CPUS[-1]
    before = os.sched_getaffinity(0)
    p = resources.bound_spawn([cpu], subprocess.Popen,
                              ["grep", "Cpus_allowed_list", "/proc/self/status"],
                              stdout=subprocess.PIPE, text=True)
    out = p.communicate(timeout=10)[0]
    assert out.split()[-1] == str(cpu)
    assert os.sched_getaffinity(0) == before


# one write per line: MPI forwards each rank's output in the pieces it was written in
MPI_HELLO = ("import os; from mpi4py import MPI; c = MPI.COMM_WORLD; "
             "os.write(1, f'rank {c.Get_rank()} {c.Get_size()}\\n'.encode())")
MPI_ENV = {"OMPI_MCA_btl": "self,tcp"}  # no shared-memory segments: tests run side by side


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI's mpirun is not installed")
def test_mpi_task_on_one_node(head, client_of):
    """An MPI command of 2 ranks (no placement from the head: all on the agent's node)."""
    connfile, _, add_agent = head
    add_agent("--slots", "2")
    c = client_of()
    item = c.run([c.cmd(f"{PY} -c \"{MPI_HELLO}\"", opts={"ranks": 2}, env=MPI_ENV)], 90)[0]
    ranks = sorted(line.split()[1:3] for line in stdout(item).splitlines()
                   if line.startswith("rank "))
    assert ranks == [["0", "2"], ["1", "2"]], stdout(item)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI's mpirun is not installed")
def test_mpi_time_limit_kills_every_rank(head, client_of, tmp_path):
    connfile, _, add_agent = head
    add_agent("--slots", "2", "--kill-grace", "1")
    c = client_of()
    pids = tmp_path / "pids"
    prog = (f"import os, time; from mpi4py import MPI; "
            f"open('{pids}', 'a').write(f'{{os.getpid()}}\\n'); time.sleep(60)")
    item = c.run([c.cmd(f"{PY} -c \"{prog}\"", opts={"ranks": 2, "timeout": 3}, env=MPI_ENV)],
                 90)[0]
    assert item[1] == P.TIMEOUT, item
    ranks = [int(x) for x in pids.read_text().split()]
    assert len(ranks) == 2
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in ranks)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI's mpirun is not installed")
def test_mpi_cancel_stops_every_rank_and_frees_the_cores(head, client_of, tmp_path):
    connfile, _, add_agent = head
    add_agent("--slots", "2")
    c = client_of()
    pids = tmp_path / "pids"
    prog = (f"import os, time; from mpi4py import MPI; "
            f"open('{pids}', 'a').write(f'{{os.getpid()}}\\n'); time.sleep(60)")
    spec = c.cmd(f"{PY} -c \"{prog}\"", opts={"ranks": 2}, env=MPI_ENV)
    c.submit([spec])
    deadline = time.monotonic() + 60
    while (not pids.exists() or len(pids.read_text().split()) < 2) and \
            time.monotonic() < deadline:
        c.drain()
        time.sleep(0.1)
    ranks = [int(x) for x in pids.read_text().split()]
    c.send([P.CANCEL, 1, [spec[0]]])
    assert spec[0] in c.recv(P.CANCEL, 30)[2]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in ranks)
    # its two cores are free again: a two-core command runs
    assert stdout(c.run([c.cmd("echo $OMP_NUM_THREADS", cores=2)])[0]).strip() == "2"


def test_mpi_task_without_mpirun_fails_clearly(head, client_of, tmp_path):
    connfile, _, _ = head
    # an agent whose PATH has no mpirun (but its Python, the head's connection file)
    agent = subprocess.Popen([PY, "-m", "shoal", "agent", "--connect", str(connfile),
                              "--slots", "2"], stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PATH": str(tmp_path), "TMPDIR": str(tmp_path)})
    try:
        c = client_of()
        item = c.run([c.cmd("true", opts={"ranks": 2})])[0]
        assert item[1] == P.ERR and b"mpirun is not on this agent's PATH" in item[2], item
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=20)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped between open and read
        return False
