"""The cluster flags of ``shoal run`` and ``python -m shoal`` (``--launcher``,
``--interface``, ``--hostfile``, ``--hosts``, ``--local``) and the ``Executor`` keywords
they give. Apart from ``shoal.launch.cluster`` (which re-exports them) so that a command
line can be parsed without importing the cluster path: ``shoal run`` then starts its
runtime before it imports the client's transport (cold start).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.launch.allocation import Allocation


def given_allocation(hostfile: str | None = None, hosts: str | None = None,
                     env: Mapping[str, str] | None = None) -> Allocation | None:
    """The allocation named on the command line (``--hostfile FILE``, ``--hosts h1:4,h2:4``,
    read by ``shoal.launch.allocation.discover``), or None when neither is given. Raises
    AllocationError naming the bad line."""
    if not hostfile and not hosts:
        return None
    from shoal.launch.allocation import discover

    return discover(os.environ if env is None else env, hostfile=hostfile, hosts=hosts)


def add_cluster_options(ap: Any) -> None:
    """``--launcher``, ``--interface``, ``--hostfile``, ``--hosts`` (``python -m shoal``, ``shoal run``)."""
    g = ap.add_argument_group("cluster (default: the batch allocation this runs in, else this machine)")
    g.add_argument("--launcher", metavar="NAME",
                   help="how agents start on the nodes: srun, mpirun, mpiexec, pbsdsh, ssh, local "
                        "(default: srun under Slurm, pbsdsh under PBS, ssh for a hostfile)")
    g.add_argument("--interface", metavar="NAME",
                   help="network interface whose address the head listens on, for the agents "
                        "(default: this host's name resolved, else the default route's)")
    hosts = g.add_mutually_exclusive_group()
    hosts.add_argument("--hostfile", metavar="FILE",
                       help="run on the hosts of FILE ('HOST N' lines: N CPUs), started with ssh")
    hosts.add_argument("--hosts", metavar="H:N,...", help="run on these hosts, e.g. n1:4,n2:4")
    g.add_argument("--local", action="store_true",
                   help="the local default (this machine only) even inside an allocation")


def cluster_kwargs(args: Any) -> dict[str, Any]:
    """Executor keywords from :func:`add_cluster_options`' flags (AllocationError,
    LauncherError: a bad hostfile or launcher, as a one-line ValueError)."""
    alloc: Allocation | bool | None = given_allocation(args.hostfile, args.hosts)
    if args.local:
        if alloc is not None or args.launcher or args.interface:
            raise ValueError("--local runs on this machine only: it takes no --hostfile, "
                             "--hosts, --launcher or --interface")
        alloc = False
    kw: dict[str, Any] = {}
    if alloc is not None:
        kw["allocation"] = alloc
    if args.launcher:
        from shoal.launch.launchers import get_launcher

        kw["launcher"] = get_launcher(args.launcher)
    if args.interface:
        kw["interface"] = args.interface
    return kw
