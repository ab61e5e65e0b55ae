"""Task resources on a real Slurm allocation: an OpenMPI task of 4 ranks over 2 nodes,
through the API and through a task file.

Inside ``salloc -N 2 --exclusive`` a driver starts a head where it runs and one agent per
node with ``srun --overlap -N2 --ntasks-per-node=1 shoal agent``, as a user would, then
submits ``ex.options(ranks=4, nodes=2).submit(Command([python, "-c", mpi4py hello]))``.
The virtual nodes share one host name, so each rank reports ``SLURMD_NODENAME``.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

DRIVER = r'''
import ctypes, json, os, signal, subprocess, sys, time
from shoal import Command, Executor

PY = sys.executable


def tied_to_me():  # the head dies with this driver, even when salloc is killed
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


conn = os.path.abspath("run.json")
head = subprocess.Popen([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                         "--connection-file", conn], preexec_fn=tied_to_me)
while not os.path.exists(conn):
    time.sleep(0.05)
agents = subprocess.Popen(["srun", "--overlap", "-N2", "-n2", "--ntasks-per-node=1", PY, "-m",
                           "shoal", "agent", "--connect", conn], preexec_fn=tied_to_me)
# one write per line: MPI forwards each rank's output in the pieces it was written in
HELLO = ("import os; from mpi4py import MPI; c = MPI.COMM_WORLD; os.write(1, "
         "f'rank {c.Get_rank()} {c.Get_size()} {os.environ.get(\"SLURMD_NODENAME\")}\\n'.encode())")
out = {}
t0 = time.monotonic()
try:
    with Executor(connect=conn, min_agents=2, start_timeout=60) as ex:
        out["agents"] = {a.name: a.node for a in ex.agents()}
        out["joined_s"] = time.monotonic() - t0
        fut = ex.options(ranks=4, nodes=2).submit(Command([PY, "-c", HELLO]))
        r = fut.result(120)
        out["mpi_done_s"] = time.monotonic() - t0
        out.update(leader=fut.agent, rc=r.returncode, stdout=r.stdout.decode(),
                   stderr=r.stderr.decode()[-3000:])
        # the MPI task's cores are free again: four one-core tasks fit at once
        out["after"] = [f.result(60).returncode for f in
                        [ex.submit(Command("true")) for _ in range(4)]]
finally:
    for p in (agents, head):
        p.send_signal(signal.SIGTERM)
    for p in (agents, head):
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
out["stopped_s"] = time.monotonic() - t0
print("RESULT " + json.dumps(out), flush=True)
'''


def test_mpi_task_of_4_ranks_over_2_nodes(slurm, tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    # (salloc waits for the nodes itself while other jobs hold them)
    # no shared-memory transport: the virtual nodes share one /dev/shm and host name
    r = slurm.run("salloc", "-N", "2", "--exclusive", sys.executable, str(driver),
                  cwd=tmp_path, timeout=240, env={"OMPI_MCA_btl": "self,tcp"})
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    out = json.loads(lines[-1][len("RESULT "):])
    assert out.get("rc") == 0, out
    ranks = [ln.split() for ln in out["stdout"].splitlines() if ln.startswith("rank ")]
    assert sorted(int(rank) for _, rank, _, _ in ranks) == [0, 1, 2, 3], out
    assert {size for _, _, size, _ in ranks} == {"4"}, out
    per_node = Counter(node for _, _, _, node in ranks)
    nodes = set(out["agents"].values())
    assert len(nodes) == 2 and set(per_node) == nodes, (per_node, out["agents"])
    assert sorted(per_node.values()) == [2, 2], per_node
    assert out["agents"][out["leader"]] in nodes, out
    assert out["after"] == [0, 0, 0, 0]
    slurm.idle(60)


def test_task_file_directives_in_an_allocation(slurm, tmp_path):
    """`shoal run tasks.txt` inside `salloc -N 2 --exclusive`, no flags: a `#shoal: ranks=4
    nodes=2` line runs as 4 MPI ranks, 2 on each node of the job; a `#shoal: cores=4` line
    gets OMP_NUM_THREADS=4."""
    hello = ("import os; from mpi4py import MPI; c = MPI.COMM_WORLD; os.write(1, f'rank "
             "{c.Get_rank()} {c.Get_size()} {os.environ.get(\\\"SLURMD_NODENAME\\\")}\\n'.encode())")
    tasks = tmp_path / "tasks.txt"
    tasks.write_text(f'#shoal: ranks=4 nodes=2\n{sys.executable} -c "{hello}"\n'
                     "#shoal: cores=4\necho big $OMP_NUM_THREADS\n"
                     "#shoal: bogus\necho never\n")
    r = slurm.run("salloc", "-N", "2", "--exclusive", sys.executable, "-m", "shoal", "run",
                  "--no-progress", str(tasks), cwd=tmp_path, timeout=240,
                  env={"OMPI_MCA_btl": "self,tcp"})
    ranks = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("rank ")]
    assert sorted(int(rank) for _, rank, _, _ in ranks) == [0, 1, 2, 3], (r.stdout, r.stderr)
    assert {size for _, _, size, _ in ranks} == {"4"}
    per_node = Counter(node for _, _, _, node in ranks)
    assert sorted(per_node.values()) == [2, 2] and len(per_node) == 2, per_node
    assert "big 4" in r.stdout.splitlines() and "never" not in r.stdout
    assert f"{tasks}:5: #shoal: unknown resource 'bogus'" in r.stderr
    assert r.returncode == 1, r.stderr  # the invalid line, and only it
    slurm.idle(60)
