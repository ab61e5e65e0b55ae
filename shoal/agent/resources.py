"""What one agent offers (cores, GPUs, memory, its node name) and how a task gets its share.

Capacity, once at start (``capacity()``):
- cores: ``--slots``, else what the allocation gave this node
  (``shoal.launch.allocation.this_node``: the job's CPUs here, not ``os.cpu_count()``), else
  the machine's cores;
- GPUs: ``--gpus N`` (ids 0..N-1) or ``--gpus 0,2,5`` (those ids), else the job's variables
  (``CUDA_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``,
  ``SLURM_STEP_GPUS``, ``SLURM_JOB_GPUS``), else the NVIDIA driver's count
  (``/proc/driver/nvidia/gpus``, else one per line of ``nvidia-smi -L``), else none;
- memory: ``--memory SIZE``, else the Slurm job's (``SLURM_MEM_PER_NODE`` or
  ``SLURM_MEM_PER_CPU`` x cores), else 0 (not counted).

Placement, per task (``Placer``): the agent picks concrete CPU ids and GPU ids from its free
sets; the head only counts. A task with GPUs sees exactly its devices (``gpu_env``). A task
of more than one core is bound to its cores (``bound_spawn``: the spawning thread's affinity
is set around the spawn, so the child starts bound, before it runs a single instruction) and
gets ``OMP_NUM_THREADS``; binding applies only when the agent's slots fit in its own CPU
affinity set (a virtual node of 4 slots on a 2-core machine cannot bind 4 distinct CPUs).
One-core tasks are neither bound nor given a variable: that path stays as cheap as it was.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger("shoal.agent")

# Variables that make a GPU task see only its devices: NVIDIA, AMD (ROCm and HIP), Intel.
GPU_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
            "ZE_AFFINITY_MASK")
# Where a job's GPUs are named, in the order they are trusted: the CUDA/ROCm variables hold
# the ids the job's processes must use (Slurm sets them relative to the job's cgroup), the
# Slurm ones the physical ids.
_DETECT_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


@dataclass(frozen=True)
class Capacity:
    """What this agent offers: sent in its HELLO."""

    slots: int
    gpus: tuple[str, ...]
    memory: int             # bytes; 0: not counted
    node: str               # the name launchers use (Slurm node name, else short host name)
    gpu_source: str = ""    # where the GPU ids came from, for the log


def parse_gpus(text: str, where: str = "--gpus") -> tuple[str, ...]:
    """``4`` -> ids 0..3, ``0,2,5`` -> those ids, ``0`` -> none; ValueError names a bad one.

    A single number is a count; a list (a trailing comma makes one: ``3,``) is device ids.
    """
    t = text.strip()
    if "," not in t:
        try:
            n = int(t)
        except ValueError:
            raise ValueError(f"{where} {text!r}: expected a GPU count (4) or device ids "
                             "(0,2,5)") from None
        if n < 0:
            raise ValueError(f"{where} {n}: must be 0 or more GPUs (leave it out to detect them)")
        return tuple(str(i) for i in range(n))
    ids = tuple(s.strip() for s in t.split(",") if s.strip())
    if not ids:
        raise ValueError(f"{where} {text!r}: no device ids")
    for i in ids:
        if i.startswith("-"):
            raise ValueError(f"{where} {text!r}: {i} is not a device id")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where} {text!r}: a device id is named twice")
    return ids


def detect_gpus(env: Mapping[str, str] | None = None) -> tuple[tuple[str, ...], str]:
    """The GPU ids this process may use and where they were found ((), "" when none)."""
    env = os.environ if env is None else env
    for var in _DETECT_VARS:
        value = env.get(var)
        if value is None:
            continue
        ids = tuple(s.strip() for s in value.split(",") if s.strip())
        if ids in (("NoDevFiles",), ("-1",)):
            ids = ()
        return ids, var  # set, even empty: the job says which (none) it may use
    try:  # the NVIDIA driver lists its GPUs here: no process to start (a local run's start-up)
        n = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        n = 0
    if n:
        return tuple(str(i) for i in range(n)), "/proc/driver/nvidia/gpus"
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("nvidia-smi -L failed (%s): no GPUs counted", exc)
            return (), ""
        if out.returncode == 0:
            n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
            return tuple(str(i) for i in range(n)), "nvidia-smi -L"
    return (), ""


def node_name(env: Mapping[str, str] | None = None) -> str:
    """The node name launchers use: ``SLURMD_NODENAME`` under Slurm, else the short host
    name."""
    env = os.environ if env is None else env
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _slurm_memory(env: Mapping[str, str], cores: int) -> int:
    """The Slurm job's memory on this node in bytes (its variables are in MiB); 0: unknown."""
    for var, per in (("SLURM_MEM_PER_NODE", 1), ("SLURM_MEM_PER_CPU", cores)):
        value = env.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value) * per << 20
    return 0


# the variables one of which every allocation allocation.discover reads sets (its
# BATCH_VARS, checked equal by tests/test_coldstart.py)
_BATCH_VARS = ("SLURM_JOB_ID", "PBS_NODEFILE", "PE_HOSTFILE", "LSB_JOBID", "FLUX_JOB_ID",
               "FLUX_URI")


def capacity(slots: int | None = None, gpus: str | None = None, memory: int | None = None,
             env: Mapping[str, str] | None = None) -> Capacity:
    """This agent's capacity from its flags, else its allocation, else the machine.

    Raises ValueError (one line, naming the flag or variable) for a bad value.
    """
    env = os.environ if env is None else env
    if slots is not None and slots < 1:
        raise ValueError(f"--slots {slots}: must be at least 1 (leave it out to use the "
                         "allocation's or every core)")
    if memory is not None and memory < 0:
        raise ValueError(f"--memory {memory}: must be 0 (not counted) or more bytes")
    node = None
    if any(env.get(v) for v in _BATCH_VARS):  # else no allocation: its readers stay unloaded
        from shoal.launch.allocation import AllocationError, this_node

        try:
            node = this_node(env)
        except AllocationError as exc:
            log.warning("cannot read the allocation (%s): using this machine's cores", exc)
    if slots is None:
        slots = node.cpus if node is not None and node.cpus > 0 else (os.cpu_count() or 1)
    source = "--gpus"
    if gpus is not None:
        ids = parse_gpus(gpus)
    else:
        ids, source = detect_gpus(env)
        if not ids and node is not None and node.gpus:
            ids, source = node.gpus, "the allocation"
    if memory is None:
        memory = _slurm_memory(env, slots)
    return Capacity(slots, ids, memory, node_name(env), source)


def gpu_env(ids: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The variables that make a process see exactly the devices ``ids``."""
    value = ",".join(ids)
    return {var: value for var in GPU_VARS}


class Placer:
    """The agent's free CPU ids and GPU ids; hands out concrete ones per task.

    CPU ids are handed out only to tasks that are bound (more than one core, binding on);
    one-core tasks and Python workers float, and the cores count (``Agent._free_cores``)
    keeps the total within the slots, so bound tasks always find enough free ids.
    """

    def __init__(self, slots: int, gpus: tuple[str, ...]) -> None:
        try:
            mine = sorted(os.sched_getaffinity(0))
        except OSError:
            mine = []
        # Bind only when every slot can have a CPU of its own within this process's set.
        self.bind = len(mine) >= slots > 0
        self.cpus: list[int] = mine[:slots] if self.bind else []
        self.free_cpus: list[int] = list(self.cpus)
        self.affinity = set(mine)
        self.gpus = gpus
        self.free_gpus: list[str] = list(gpus)
        self.warned_nobind = False

    def why_not_bound(self, slots: int) -> str:
        return (f"{slots} slots but this agent may run on {len(self.affinity)} CPUs "
                f"({_ranges(sorted(self.affinity))}): multi-core tasks get OMP_NUM_THREADS "
                "but are not bound to cores")

    def take_cpus(self, n: int) -> list[int] | None:
        """``n`` free CPU ids (lowest first), or None when binding is off or too few."""
        if not self.bind or n > len(self.free_cpus):
            return None
        self.free_cpus.sort()
        got, self.free_cpus = self.free_cpus[:n], self.free_cpus[n:]
        return got

    def take_gpus(self, n: int) -> list[str] | None:
        """``n`` free GPU ids, or None while fewer are free (the task waits for them)."""
        if n > len(self.free_gpus):
            return None
        got, self.free_gpus = self.free_gpus[:n], self.free_gpus[n:]
        return got

    def give_back(self, cpus: list[int] | None, gpus: list[str] | None) -> None:
        if cpus:
            self.free_cpus.extend(cpus)
        if gpus:
            order = {g: i for i, g in enumerate(self.gpus)}
            self.free_gpus.extend(gpus)
            self.free_gpus.sort(key=lambda g: order.get(g, 0))


def bound_spawn(cpus: list[int] | None, spawn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """``spawn(*args, **kwargs)`` with this thread's CPU affinity set to ``cpus`` meanwhile:
    the child inherits it at clone, so it never runs outside its cores (setting it on the
    child after the spawn would race with its exec and the threads it starts)."""
    if not cpus:
        return spawn(*args, **kwargs)
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return spawn(*args, **kwargs)
    finally:
        os.sched_setaffinity(0, saved)


def _ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    out: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def describe(cap: Capacity, placer: Placer) -> str:
    """One log line: what this agent offers."""
    gpus = (f"{len(cap.gpus)} GPUs ({','.join(cap.gpus)}, from {cap.gpu_source})"
            if cap.gpus else "no GPUs")
    mem = f"{cap.memory >> 20} MiB" if cap.memory else "memory not counted"
    bind = f"cores bound on CPUs {_ranges(placer.cpus)}" if placer.bind else "cores not bound"
    return f"node {cap.node}: {cap.slots} slots, {gpus}, {mem}, {bind}"


# ---- MPI tasks -------------------------------------------------------------------------
MPI_LAUNCHERS = ("mpirun", "srun")


class MpiError(ValueError):
    """An MPI task cannot be launched here; the message says why and what to do."""


def mpi_hosts(opts: dict, cores: int, node: str) -> list[tuple[str, int, int]]:
    """``opts["hosts"]`` as (node, ranks there, cores per rank), this node first; all
    ranks here when the head sent no placement. MpiError for a malformed one."""
    ranks = opts.get("ranks")
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise MpiError(f"opts ranks={ranks!r}: expected a number of MPI ranks >= 1")
    hosts = opts.get("hosts")
    if not hosts:
        return [(node, ranks, max(1, cores))]
    out = []
    try:
        for name, n, c in hosts:
            if not isinstance(name, str) or not name or int(n) < 1 or int(c) < 1:
                raise ValueError
            out.append((name, int(n), int(c)))
    except (TypeError, ValueError):
        raise MpiError(f"opts hosts={hosts!r}: expected [[node, ranks, cores per rank], ...]"
                       ) from None
    if sum(n for _, n, _ in out) != ranks:
        raise MpiError(f"opts hosts={hosts!r} place {sum(n for _, n, _ in out)} ranks, "
                       f"not the {ranks} asked for")
    return out


def mpi_command(argv: list[str], hosts: list[tuple[str, int, int]], launcher: str,
                env: Mapping[str, str], pass_env: list[str]
                ) -> tuple[list[str], dict[str, str | None]]:
    """The argv that runs ``argv`` as an MPI job over exactly ``hosts`` (their names and
    rank counts), and the variables the launcher needs (None: unset it); MpiError when it
    cannot run here.

    - ``mpirun`` (OpenMPI, the default): ``--host n1:2,n2:2 -n 4 --bind-to none``; the
      task's variables travel with ``-x`` (under ssh launch they would not otherwise);
      ``--allow-run-as-root`` only as root. Under Slurm its daemons start through an inner
      ``srun``, told to overlap the agents' own step (``SLURM_OVERLAP``), and the slots come
      from ``--host`` alone (``OMPI_MCA_ras=^slurm``: the step says one per node).
    - ``srun`` (``shoal agent --mpi-launcher srun``, under Slurm): ``--overlap
      --nodelist=n1,n1,n2,n2 --ntasks=4 --distribution=arbitrary`` (a node named once per
      rank: each node gets exactly its ranks, even uneven counts). The MPI plug-in is the
      site's (``MpiDefault``, or ``SLURM_MPI_TYPE=pmix`` in the agent's environment).
    """
    ranks = sum(n for _, n, _ in hosts)
    extra: dict[str, str | None] = {}
    path = env.get("PATH", os.defpath)
    if launcher == "srun":
        if shutil.which("srun", path=path) is None:
            raise MpiError(f"this task asks for {ranks} MPI ranks, launched with srun "
                           "(--mpi-launcher srun), but srun is not on this agent's PATH")
        if not env.get("SLURM_JOB_ID"):
            raise MpiError(f"this task asks for {ranks} MPI ranks, launched with srun "
                           "(--mpi-launcher srun), but this agent runs outside a Slurm job")
        # the agents' own step said one task per node: not this step's business
        extra["SLURM_NTASKS_PER_NODE"] = None
        cpt = max(c for _, _, c in hosts)
        names = ",".join(name for name, n, _ in hosts for _ in range(n))
        return ["srun", "--overlap", f"--nodelist={names}", f"--ntasks={ranks}",
                "--distribution=arbitrary", f"--cpus-per-task={cpt}", "--kill-on-bad-exit=1",
                *argv], extra
    if launcher != "mpirun":
        raise MpiError(f"MPI launcher {launcher!r}: expected one of {', '.join(MPI_LAUNCHERS)}")
    if shutil.which("mpirun", path=path) is None:
        raise MpiError(f"this task asks for {ranks} MPI ranks, but mpirun is not on this "
                       "agent's PATH (install OpenMPI on the nodes, or start the agent with "
                       "--mpi-launcher srun under Slurm)")
    cmd = ["mpirun", "--host", ",".join(f"{name}:{n}" for name, n, _ in hosts), "-n", str(ranks),
           "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for var in pass_env:
        cmd += ["-x", var]
    if env.get("SLURM_JOB_ID"):
        extra["SLURM_OVERLAP"] = "1"  # mpirun's own srun shares the CPUs of the agents' step
        if "OMPI_MCA_ras" not in env:
            # Slurm's view from inside the agents' step is one slot per node (its
            # SLURM_TASKS_PER_NODE): "not enough slots". --host names the slots shoal placed.
            extra["OMPI_MCA_ras"] = "^slurm"
    return [*cmd, *argv], extra
