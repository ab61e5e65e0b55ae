"""Allocation discovery: which nodes and resources this batch job was given.

*Where* agents run, apart from *how* they start (``shoal.launch`` launchers) and *who* asks
the batch system for nodes (pilot jobs): Parsl's provider/launcher split. ``discover()``
reads only the job's own variables and files (never ``os.cpu_count()``: a node's hardware
threads are not what the job was given); outside any allocation it returns None and the
local default stays as it is.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field


class AllocationError(ValueError):
    """The allocation's description cannot be read; the message names what and where."""


@dataclass(frozen=True)
class Node:
    """One node of an allocation, as the site's launcher names it."""

    name: str                      # host name for launchers (srun --nodelist, mpirun -H, ssh)
    cpus: int                      # CPUs this job was given there
    gpus: tuple[str, ...] = ()     # GPU ids this job was given there ("0", "1", ...)


@dataclass(frozen=True)
class Allocation:
    """The nodes of one batch job (or hostfile) and what it may use on each."""

    kind: str                      # "slurm" | "pbs" | "sge" | "lsf" | "flux" | "hostfile"
    nodes: tuple[Node, ...]
    job_id: str | None = None
    end_time: float | None = None  # epoch seconds when the job's walltime ends, when known
    source: str = ""               # where it was read from, for `shoal info` and errors
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def cpus(self) -> int:
        return sum(n.cpus for n in self.nodes)

    @property
    def gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    def describe(self) -> str:
        """One line: ``slurm job 42: 4 nodes (n[1-4]), 16 CPUs, 0 GPUs``."""
        job = f" job {self.job_id}" if self.job_id else ""
        names = ",".join(n.name for n in self.nodes[:8]) + (",..." if len(self.nodes) > 8 else "")
        return (f"{self.kind}{job}: {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''} "
                f"({names}), {self.cpus} CPUs, {self.gpus} GPUs")


def discover(env: Mapping[str, str] | None = None) -> Allocation | None:
    """The allocation this process runs in, from the batch system's variables; None outside
    any (the local default then applies). Raises AllocationError when the variables are
    there but cannot be read."""
    env = os.environ if env is None else env
    if env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST")):
        return slurm(env)
    return None


# ---- Slurm ----------------------------------------------------------------------------
def slurm(env: Mapping[str, str]) -> Allocation:
    """Nodes from ``SLURM_JOB_NODELIST`` (python-hostlist, Slurm's own syntax), CPUs per node
    from ``SLURM_JOB_CPUS_PER_NODE`` (``4(x2),1``), GPUs from ``SLURM_JOB_GPUS`` /
    ``SLURM_STEP_GPUS`` / ``CUDA_VISIBLE_DEVICES`` (the same ids on every node, as Slurm
    gives them), walltime end from ``SLURM_JOB_END_TIME``."""
    import hostlist  # python-hostlist: Slurm's hostlist syntax, ranges, padding, nesting

    spec = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    try:
        names = hostlist.expand_hostlist(spec)
    except hostlist.BadHostlist as exc:
        raise AllocationError(f"SLURM_JOB_NODELIST={spec!r}: not a Slurm host list ({exc})")
    if not names:
        raise AllocationError("SLURM_JOB_NODELIST is empty")
    cpus_spec = env.get("SLURM_JOB_CPUS_PER_NODE", "")
    cpus = expand_counts(cpus_spec, "SLURM_JOB_CPUS_PER_NODE") if cpus_spec else []
    if cpus and len(cpus) != len(names):
        raise AllocationError(f"SLURM_JOB_CPUS_PER_NODE={cpus_spec!r} names {len(cpus)} nodes, "
                              f"SLURM_JOB_NODELIST={spec!r} {len(names)}")
    if not cpus:  # an old Slurm or a stripped environment: the node's own share, else 1
        per = _int(env.get("SLURM_CPUS_ON_NODE"), "SLURM_CPUS_ON_NODE") or 1
        cpus = [per] * len(names)
    gpus = _gpu_ids(env.get("SLURM_JOB_GPUS") or env.get("SLURM_STEP_GPUS")
                    or env.get("CUDA_VISIBLE_DEVICES") or "")
    end = env.get("SLURM_JOB_END_TIME")
    return Allocation(
        kind="slurm",
        nodes=tuple(Node(n, c, gpus) for n, c in zip(names, cpus, strict=True)),
        job_id=env.get("SLURM_JOB_ID"),
        end_time=float(end) if end and end.isdigit() and int(end) > 0 else None,
        source="SLURM_JOB_NODELIST",
    )


_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_counts(spec: str, what: str) -> list[int]:
    """Slurm's compressed counts: ``4(x2),1`` -> ``[4, 4, 1]``."""
    out: list[int] = []
    for part in spec.split(","):
        m = _COUNT.match(part.strip())
        if m is None:
            raise AllocationError(f"{what}={spec!r}: cannot read {part!r} (expected N or N(xK))")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def _gpu_ids(spec: str) -> tuple[str, ...]:
    ids = tuple(s.strip() for s in spec.split(",") if s.strip())
    return () if ids in (("NoDevFiles",), ("-1",)) else ids


def _int(value: str | None, what: str) -> int | None:
    if not value:
        return None
    m = re.match(r"^\d+", value.strip())
    if m is None:
        raise AllocationError(f"{what}={value!r}: not a number")
    return int(m.group(0))


# ---- this node ------------------------------------------------------------------------
def this_node(env: Mapping[str, str] | None = None) -> Node | None:
    """What the allocation gave the node this process runs on (an agent's default slots
    and GPUs), or None outside any allocation. Under Slurm the node is ``SLURMD_NODENAME``;
    elsewhere this host's short name matched against the allocation's nodes."""
    env = os.environ if env is None else env
    alloc = discover(env)
    if alloc is None:
        return None
    name = env.get("SLURMD_NODENAME") if alloc.kind == "slurm" else None
    if alloc.kind == "slurm" and name is None and env.get("SLURM_CPUS_ON_NODE"):
        cpus = _int(env.get("SLURM_CPUS_ON_NODE"), "SLURM_CPUS_ON_NODE") or 1
        return Node(socket.gethostname().split(".")[0], cpus, alloc.nodes[0].gpus)
    if name is None:
        short = socket.gethostname().split(".")[0]
        name = next((n.name for n in alloc.nodes if n.name.split(".")[0] == short), None)
    for node in alloc.nodes:
        if node.name == name:
            return node
    return None
