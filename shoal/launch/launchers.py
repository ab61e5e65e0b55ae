"""Launchers: *how* one agent starts on each node of an allocation.

Parsl's split: discovery (``shoal.launch.allocation``) says which nodes and what they have,
a launcher turns "start this agent command once on each of these nodes" into the command
lines to run here (``srun``, ``mpirun``/``mpiexec``, ``pbsdsh``, ``ssh``, or locally), and
``shoal.launch.cluster`` runs them and waits for the agents to join. A launcher only builds
argument vectors: nothing here starts a process, so the exact command lines are unit-tested.

Every node's agent gets ``--slots`` = the CPUs the allocation gave that node and ``--gpus``
(its GPU ids) only when it has GPUs. Launchers that start many nodes in one command (srun, mpirun,
pbsdsh) start one command per group of nodes with the same CPUs and GPU ids.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shoal.launch.allocation import Allocation, Node

__all__ = ["LAUNCHERS", "Launch", "Launcher", "LauncherError", "LocalLauncher", "MpirunLauncher",
           "PbsdshLauncher", "SrunLauncher", "SshLauncher", "default_launcher", "get_launcher",
           "node_args"]


class LauncherError(ValueError):
    """A launcher cannot be used here (unknown name, its program is missing)."""


@dataclass(frozen=True)
class Launch:
    """One command to run on this host, starting an agent on each of ``nodes``."""

    nodes: tuple[Node, ...]
    argv: tuple[str, ...]
    env: Mapping[str, str] | None = None  # extra environment of that command (else inherited)

    def __str__(self) -> str:
        return shlex.join(self.argv)


def node_args(node: Node) -> list[str]:
    """The per-node agent arguments: ``--slots`` = the node's CPUs (none when the allocation
    does not say: ``cpus`` 0, the agent counts them there), ``--gpus`` when it has GPUs."""
    args = ["--slots", str(node.cpus)] if node.cpus > 0 else []
    if node.gpus:  # the device ids the job was given (a trailing comma: "3," is id 3, not 3 GPUs)
        args += ["--gpus", ",".join(node.gpus) + ("," if len(node.gpus) == 1 else "")]
    return args


def _groups(nodes: Sequence[Node]) -> list[tuple[Node, ...]]:
    """Nodes grouped by what their agents are given (same CPUs and GPU ids), in order."""
    groups: dict[tuple[int, tuple[str, ...]], list[Node]] = {}
    for n in nodes:
        groups.setdefault((n.cpus, n.gpus), []).append(n)
    return [tuple(g) for g in groups.values()]


class Launcher:
    """Builds the commands that start ``agent`` (an argument vector) on every node.

    ``agent`` is the command each node runs (``python -m shoal.launch.cluster ...``);
    :func:`node_args` of the node is appended. ``env`` holds variables the agents need that
    a launcher may not pass on by itself (``PYTHONPATH``, ``SHOAL_*``).
    """

    name = "?"
    program: str | None = None     # the launcher program that must be on PATH

    def launches(self, nodes: Sequence[Node], agent: Sequence[str],
                 env: Mapping[str, str] | None = None) -> list[Launch]:
        raise NotImplementedError

    def check(self) -> None:
        """Raise LauncherError when this launcher cannot run here."""
        if self.program and shutil.which(self.program) is None:
            raise LauncherError(f"launcher {self.name!r}: {self.program!r} is not on PATH")


class LocalLauncher(Launcher):
    """Runs each node's agent as a child of this process: for nodes that are this host."""

    name = "local"

    def launches(self, nodes: Sequence[Node], agent: Sequence[str],
                 env: Mapping[str, str] | None = None) -> list[Launch]:
        return [Launch((n,), (*agent, "--node", n.name, *node_args(n)), dict(env or {}))
                for n in nodes]


class SrunLauncher(Launcher):
    """``srun --overlap``: one step per group of like nodes, one task (agent) per node.

    ``--overlap`` lets the agents' step share the CPUs with the program's own (and with
    the MPI steps the agents start); ``--ntasks=N --ntasks-per-node=1`` overrides a job
    submitted with more tasks per node; ``--cpu-bind=none`` leaves CPU placement to the
    agent; ``--kill-on-bad-exit=0`` keeps the other agents when one fails.
    """

    name = "srun"
    program = "srun"

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self.extra = tuple(extra)

    def launches(self, nodes: Sequence[Node], agent: Sequence[str],
                 env: Mapping[str, str] | None = None) -> list[Launch]:
        out = []
        for group in _groups(nodes):
            first = group[0]
            argv = ["srun", "--overlap", f"--nodes={len(group)}", f"--ntasks={len(group)}",
                    "--ntasks-per-node=1",
                    *([f"--cpus-per-task={first.cpus}"] if first.cpus > 0 else []),
                    "--cpu-bind=none", "--kill-on-bad-exit=0", "--job-name=shoal-agents",
                    f"--nodelist={','.join(n.name for n in group)}"]
            if first.gpus:
                argv.append(f"--gpus-per-node={len(first.gpus)}")
            argv += [*self.extra, *agent, *node_args(first)]
            out.append(Launch(group, tuple(argv), dict(env or {})))
        return out


class MpirunLauncher(Launcher):
    """``mpirun``/``mpiexec``: one agent per host. OpenMPI (4.x): ``-H h1:1,h2:1 --map-by
    ppr:1:node --bind-to none``, variables forwarded with ``-x``; MPICH/Hydra: ``-hosts
    h1,h2 -ppn 1 -genvlist``. The agents run no MPI code: a failed one prints its error
    and exits 0 (``--exit-zero``) so that mpirun does not take the others down with it."""

    name = "mpirun"

    def __init__(self, program: str = "mpirun", flavor: str | None = None,
                 extra: Sequence[str] = ()) -> None:
        self.program = program
        self.flavor = flavor
        self.extra = tuple(extra)

    def _flavor(self) -> str:
        if self.flavor is None:
            self.flavor = mpi_flavor(self.program)
        return self.flavor

    def launches(self, nodes: Sequence[Node], agent: Sequence[str],
                 env: Mapping[str, str] | None = None) -> list[Launch]:
        env = dict(env or {})
        flavor = self._flavor()
        out = []
        for group in _groups(nodes):
            names = [n.name for n in group]
            if flavor == "mpich":
                argv = [self.program, "-n", str(len(group)), "-hosts", ",".join(names), "-ppn", "1"]
                if env:
                    argv += ["-genvlist", ",".join(sorted(env))]
            else:
                argv = [self.program, "-n", str(len(group)),
                        "-H", ",".join(f"{h}:1" for h in names),
                        "--map-by", "ppr:1:node", "--bind-to", "none"]
                for var in sorted(env):
                    argv += ["-x", var]
            argv += [*self.extra, *agent, "--exit-zero", *node_args(group[0])]
            launch_env = dict(env)
            if flavor != "mpich" and os.geteuid() == 0:  # OpenMPI refuses root without these
                launch_env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            out.append(Launch(group, tuple(argv), launch_env))
        return out


def mpi_flavor(program: str = "mpirun") -> str:
    """``"openmpi"`` or ``"mpich"`` from ``PROGRAM --version`` (OpenMPI when it cannot tell)."""
    try:
        out = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "openmpi"
    text = out.stdout + out.stderr
    return "mpich" if ("HYDRA" in text or "MPICH" in text or "Intel(R) MPI" in text) else "openmpi"


class PbsdshLauncher(Launcher):
    """PBS/Torque ``pbsdsh``: ``-u`` (once per node) when the group is the whole job, else
    one ``pbsdsh -h HOST`` per node. pbsdsh passes no environment: the agents get theirs
    through ``env VAR=...``."""

    name = "pbsdsh"
    program = "pbsdsh"

    def launches(self, nodes: Sequence[Node], agent: Sequence[str],
                 env: Mapping[str, str] | None = None) -> list[Launch]:
        prefix = ["env", *(f"{k}={v}" for k, v in sorted((env or {}).items()))] if env else []
        groups = _groups(nodes)
        if len(groups) == 1:
            return [Launch(groups[0], ("pbsdsh", "-u", "--", *prefix, *agent,
                                       *node_args(groups[0][0])), None)]
        return [Launch((n,), ("pbsdsh", "-h", n.name, "--", *prefix, *agent, "--node", n.name,
                              *node_args(n)), None) for n in nodes]


class SshLauncher(Launcher):
    """One ``ssh HOST`` per node, never asking for a password (``BatchMode=yes``); the
    remote command starts in this directory with this ``PYTHONPATH`` (a shared file
    system is assumed, as for the connection file)."""

    name = "ssh"
    program = "ssh"

    def __init__(self, extra: Sequence[str] = (), connect_timeout: int = 5) -> None:
        self.extra = tuple(extra)
        self.connect_timeout = connect_timeout

    def launches(self, nodes: Sequence[Node], agent: Sequence[str],
                 env: Mapping[str, str] | None = None) -> list[Launch]:
        out = []
        for n in nodes:
            words = ["env", *(f"{k}={v}" for k, v in sorted((env or {}).items())),
                     *agent, "--node", n.name, *node_args(n)]
            remote = f"cd {shlex.quote(os.getcwd())} && exec {shlex.join(words)}"
            argv = ("ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}",
                    "-T", *self.extra, n.name, remote)
            out.append(Launch((n,), argv, None))
        return out


LAUNCHERS: dict[str, type[Launcher]] = {
    "local": LocalLauncher, "srun": SrunLauncher, "mpirun": MpirunLauncher,
    "mpiexec": MpirunLauncher, "pbsdsh": PbsdshLauncher, "ssh": SshLauncher,
}


def get_launcher(name: str) -> Launcher:
    """The launcher called ``name`` (``--launcher NAME``); LauncherError for an unknown one."""
    cls = LAUNCHERS.get(name)
    if cls is None:
        raise LauncherError(f"unknown launcher {name!r} (choose from {', '.join(LAUNCHERS)})")
    if cls is MpirunLauncher:
        return MpirunLauncher(program=name)
    return cls()


def default_launcher(alloc: Allocation) -> Launcher:
    """The launcher for an allocation kind: Slurm -> srun, PBS -> pbsdsh (mpirun where
    pbsdsh is missing), everything else (SGE, LSF, Flux, a hostfile, ``--hosts``) -> ssh
    (mpirun where ssh is missing); a hostfile naming only this host -> local."""
    if alloc.kind == "slurm":
        return SrunLauncher()
    if alloc.kind == "pbs":
        return PbsdshLauncher() if shutil.which("pbsdsh") else MpirunLauncher()
    if alloc.kind in ("hostfile", "hosts") and all(_is_this_host(n.name) for n in alloc.nodes):
        return LocalLauncher()
    return SshLauncher() if shutil.which("ssh") or not shutil.which("mpirun") else MpirunLauncher()


def _is_this_host(name: str) -> bool:
    import socket

    return name in ("localhost", "127.0.0.1") or name.split(".")[0] == socket.gethostname().split(".")[0]
