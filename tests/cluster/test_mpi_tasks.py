"""MPI tasks launched by the leader agent over the hosts placed for them, on a real Slurm.

Inside ``salloc -N 2 --exclusive`` a driver starts a head and one agent per node with
``srun --overlap -N2 --ntasks-per-node=1`` (each named after its Slurm node), then sends a
raw MPI task (opts ``ranks`` 4, ``nodes`` 2; the head adds ``hosts`` [[n_a, 2, 1], [n_b, 2,
1]] and sends it to the leader) running an mpi4py hello: 4 distinct ranks, 2 on each node. The agents offer
the allocation's CPUs of their node without being told (--slots left out). Once with the
default launcher (OpenMPI's mpirun), once with ``--mpi-launcher srun``.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

DRIVER = r'''
import ctypes, json, os, pickle, signal, subprocess, sys, time
from shoal import Executor
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection
from tests.test_journal import RawClient

PY = sys.executable
LAUNCHER = sys.argv[1]


def tied_to_me():  # the head and agents die with this driver, even when salloc is killed
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


conn = os.path.abspath("run.json")
head = subprocess.Popen([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                         "--connection-file", conn], preexec_fn=tied_to_me)
while not os.path.exists(conn):
    time.sleep(0.05)
agents = subprocess.Popen(
    ["srun", "--overlap", "-N2", "-n2", "--ntasks-per-node=1", "bash", "-c",
     f'exec {PY} -m shoal agent --connect {conn} --name agent-$SLURMD_NODENAME '
     f'--mpi-launcher {LAUNCHER}'], preexec_fn=tied_to_me)
# one write per line: MPI forwards each rank's output in the pieces it was written in
HELLO = ("import os; from mpi4py import MPI; c = MPI.COMM_WORLD; os.write(1, "
         "f'rank {c.Get_rank()} {c.Get_size()} {os.environ.get(\"SLURMD_NODENAME\")}\\n'.encode())")
nodes = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                       capture_output=True, text=True, check=True).stdout.split()
out = {"nodes": nodes}
try:
    with Executor(connect=conn) as ex:
        deadline = time.monotonic() + 60
        while len(ex.agents()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        out["agents"] = sorted(a.name for a in ex.agents())
        out["slots"] = [a.slots for a in ex.agents()]
    c = RawClient(Connection.read(conn))
    c.seq += 1
    # the head places it (opts "hosts", the leader's node first) and sends it to the leader
    spec = [c.origin | c.seq, P.CMD, 0, {"argv": [PY, "-c", HELLO]}, [], 1, -1, None,
            {"ranks": 4, "nodes": 2}]
    c.submit([spec])
    c.wait_results(1, 120)
    item = c.results[spec[0]]
    out["status"] = item[1]
    if item[1] == P.OK:
        r = pickle.loads(item[2])
        out.update(rc=r.returncode, stdout=r.stdout.decode(), stderr=r.stderr.decode()[-3000:])
    else:
        out["error"] = item[2].decode(errors="replace")[-3000:]
    c.close()
finally:
    for p in (agents, head):
        p.send_signal(signal.SIGTERM)
    for p in (agents, head):
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
print("RESULT " + json.dumps(out), flush=True)
'''


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_mpi_task_of_4_ranks_over_2_placed_nodes(slurm, tmp_path, launcher):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    # no shared-memory transport: the virtual nodes share one /dev/shm and host name
    env = {"OMPI_MCA_btl": "self,tcp"}
    if launcher == "srun":
        env["SLURM_MPI_TYPE"] = "pmix"
    # (salloc waits for the nodes itself while other jobs hold them)
    r = slurm.run("salloc", "-N", "2", "--exclusive", sys.executable, str(driver), launcher,
                  cwd=tmp_path, timeout=240, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    out = json.loads(lines[-1][len("RESULT "):])
    assert out.get("rc") == 0, json.dumps(out, indent=1)
    nodes = out["nodes"]
    assert out["agents"] == sorted(f"agent-{n}" for n in nodes), out
    assert out["slots"] == [4, 4], out  # the job's CPUs on each node (4), not os.cpu_count()
    ranks = [ln.split() for ln in out["stdout"].splitlines() if ln.startswith("rank ")]
    assert sorted(int(rank) for _, rank, _, _ in ranks) == [0, 1, 2, 3], json.dumps(out, indent=1)
    assert {size for _, _, size, _ in ranks} == {"4"}, out
    assert Counter(node for _, _, _, node in ranks) == {nodes[0]: 2, nodes[1]: 2}, out
