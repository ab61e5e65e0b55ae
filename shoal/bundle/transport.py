"""Deliver bundles to node-local storage on every node: ``local``, ``mpi``, ``sbcast``, ``agents``.

``auto`` picks, in order: shoal agents (when a runtime is named with ``connect=`` /
``--connect`` / ``$SHOAL_CONNECT``, or an executor or delivery function is registered in
this process), MPI in-process (when this process is already an MPI rank), Slurm ``sbcast``
(inside a Slurm allocation), ``mpirun`` (when a non-Slurm allocation names hosts), and
plain ``local`` unpacking otherwise.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .archive import BundleError, expected_digest
from .install import cleanup, unpack_bundles
from .report import DeliveryReport

TRANSPORTS = ("auto", "local", "mpi", "sbcast", "agents")

# The agents transport: an Executor connected to a running shoal runtime (its agents
# receive, see shoal.bundle.agents), or a callable ``deliver(bundle_paths, dest)`` that
# gets the bundles onto every node and unpacks them there (each node calling
# ``shoal.bundle.unpack_bundles`` or feeding a ``StreamUnpacker``); it raises on failure.
AgentTransport = Callable[[Sequence[Path], Path], object]
_agent_transport: Any = None


def register_agent_transport(fn: Any) -> None:
    """Install (or with None remove) what delivers through shoal agents: an ``Executor``
    (its agents receive, one per node) or a function ``deliver(bundle_paths, dest)``."""
    global _agent_transport
    _agent_transport = fn


def _is_executor(obj: Any) -> bool:
    return hasattr(obj, "agents") and hasattr(obj, "options")


def _connect_file(connect: str | None) -> str | None:
    return connect or os.environ.get("SHOAL_CONNECT") or None


def _in_mpi_job() -> bool:
    if not any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")):
        return False
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def _in_slurm() -> bool:
    return "SLURM_JOB_ID" in os.environ and shutil.which("sbcast") is not None and shutil.which("srun") is not None


def _other_allocation() -> bool:
    return any(k in os.environ for k in ("PBS_NODEFILE", "LSB_HOSTS", "PE_HOSTFILE")) and shutil.which("mpirun") is not None


def choose(transport: str = "auto", connect: str | None = None) -> str:
    """Resolve ``auto`` to a concrete transport for this process and allocation."""
    if transport not in TRANSPORTS:
        raise BundleError(f"unknown transport {transport!r} (choose from {', '.join(TRANSPORTS)})")
    if transport != "auto":
        return transport
    if _agent_transport is not None or _connect_file(connect):
        return "agents"
    if _in_mpi_job() or _other_allocation():
        return "mpi"
    if _in_slurm():
        return "sbcast"
    return "local"


def default_mpirun() -> list[str]:
    """The launcher for the ``mpi`` transport: ``$SHOAL_MPIRUN`` or one rank per node with OpenMPI."""
    env = os.environ.get("SHOAL_MPIRUN")
    return shlex.split(env) if env else ["mpirun", "--map-by", "ppr:1:node"]


def deliver(
    bundle_paths: Sequence[Path | str],
    dest: Path | str,
    transport: str = "auto",
    *,
    fresh: bool = False,
    mpirun: Sequence[str] | None = None,
    receivers: str = "per-node",
    json_out: bool = False,
    python: str | None = None,
    connect: str | None = None,
    chunk_size: int | None = None,
) -> DeliveryReport:
    """Put ``bundle_paths`` (in overlay order) into ``dest`` on every node of the job.

    Every node verifies every checksum; nothing half-unpacked is ever reachable at
    ``dest``. ``fresh`` replaces what is there instead of overlaying it. ``connect``
    (default ``$SHOAL_CONNECT``) names a running runtime's connection file for the
    ``agents`` transport. Raises BundleError on bad input; a failed remote node shows
    as a non-zero ``status`` (and, for agents, a line in ``errors``).
    """
    paths = [Path(os.path.abspath(p)) for p in bundle_paths]
    dest = Path(os.path.abspath(str(dest))) if "{" not in str(dest) else Path(str(dest))
    for p in paths:
        if not p.is_file():
            raise BundleError(f"{p}: no such bundle file")
        expected_digest(p)
    how = choose(transport, connect)
    t0 = time.perf_counter()
    status = 0
    if how == "local":
        unpack_bundles(paths, dest, overlay=not fresh)
    elif how == "agents":
        from .agents import CHUNK, deliver_via_agents

        def via(ex: Any) -> DeliveryReport:
            return deliver_via_agents(ex, paths, dest, fresh=fresh, chunk_size=chunk_size or CHUNK)

        if _connect_file(connect):
            return _with_executor(_connect_file(connect), via)
        if _is_executor(_agent_transport):
            return via(_agent_transport)
        if _agent_transport is None:
            raise BundleError("transport 'agents': no shoal runtime to deliver through (give --connect FILE, "
                              "set SHOAL_CONNECT, or register_agent_transport(executor))")
        res = _agent_transport(paths, dest)
        if isinstance(res, DeliveryReport):
            return res
    elif how == "mpi":
        args = [*map(str, paths), "--to", str(dest), "--receivers", receivers]
        args += ["--fresh"] if fresh else []
        args += ["--json"] if json_out else []
        status = _mpi(args, mpirun, python)
    elif how == "sbcast":
        status = _sbcast(paths, dest, fresh, python)
    return DeliveryReport(how, time.perf_counter() - t0, status)


def _with_executor(connect: str, fn: Callable[[Any], DeliveryReport]) -> DeliveryReport:
    """Run ``fn(executor)`` with a client of the runtime whose connection file is ``connect``."""
    from shoal.client.executor import Executor, ExecutorError

    try:
        ex = Executor(connect=connect)
    except (OSError, ValueError, ExecutorError) as exc:
        raise BundleError(f"transport 'agents': cannot connect to the runtime of {connect}: {exc}") from None
    try:
        return fn(ex)
    except ExecutorError as exc:
        raise BundleError(f"transport 'agents': the runtime of {connect} failed: {exc}") from None
    finally:
        ex.shutdown(wait=True, cancel_futures=True)  # everything is settled already, unless interrupted


def remove_everywhere(
    dest: Path | str, transport: str = "auto", *, mpirun: Sequence[str] | None = None,
    receivers: str = "per-node", python: str | None = None, connect: str | None = None,
) -> DeliveryReport:
    """Remove the node-local copies at ``dest`` on every node (end of job)."""
    how = choose(transport, connect)
    t0 = time.perf_counter()
    status = 0
    if how == "agents" and (_connect_file(connect) or _is_executor(_agent_transport)):
        from .agents import cleanup_via_agents

        if _connect_file(connect):
            return _with_executor(_connect_file(connect), lambda ex: cleanup_via_agents(ex, dest))
        return cleanup_via_agents(_agent_transport, dest)
    if how in ("local", "agents"):  # a registered function: its agents clean their own scratch
        cleanup(Path(dest))
    elif how == "mpi":
        status = _mpi(["--to", str(dest), "--cleanup", "--receivers", receivers], mpirun, python)
    elif how == "sbcast":
        status = _srun_each_node([python or sys.executable, "-m", "shoal.bundle.node", "cleanup", "--to", str(dest)])
    return DeliveryReport(how, time.perf_counter() - t0, status)


def _mpi(args: list[str], mpirun: Sequence[str] | None, python: str | None) -> int:
    if _in_mpi_job():  # we are already a rank: take part directly
        from .mpi import run

        return run(args)
    launcher = list(mpirun) if mpirun else default_mpirun()
    if shutil.which(launcher[0]) is None:
        raise BundleError(f"transport 'mpi': launcher {launcher[0]!r} not found on PATH")
    cmd = [*launcher, python or sys.executable, "-m", "shoal.bundle.mpi", *args]
    return subprocess.run(cmd).returncode


def _srun_each_node(cmd: list[str]) -> int:
    nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
    return subprocess.run(["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                           "--mpi=none", *cmd]).returncode


def _sbcast(paths: list[Path], dest: Path, fresh: bool, python: str | None) -> int:
    """Slurm's own tree broadcast of each file to node-local ``dest``'s parent, then one
    unpacker per node (which verifies, installs atomically and deletes the copies)."""
    py = python or sys.executable
    incoming = dest.parent / f".{dest.name}.shoal-in-{os.environ.get('SLURM_JOB_ID', 'x')}"
    rc = _srun_each_node([py, "-m", "shoal.bundle.node", "prepare", "--to", str(dest), "--dir", str(incoming)])
    if rc != 0:
        return rc
    args = []
    for p in paths:
        r = subprocess.run(["sbcast", "--force", str(p), str(incoming / p.name)])
        if r.returncode != 0:
            return r.returncode
        args += [str(incoming / p.name), f"--sha256={expected_digest(p)}"]
    return _srun_each_node([py, "-m", "shoal.bundle.node", "unpack", "--to", str(dest),
                            "--remove-inputs", *(["--fresh"] if fresh else []), *args])
