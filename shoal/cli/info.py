"""`shoal info`: what shoal discovers about where it runs.

    $ salloc -N 2 --exclusive shoal info
    allocation: slurm job 7 (from SLURM_JOB_NODELIST): 2 nodes, 8 CPUs, 0 GPUs
      n1  4 CPUs
      n2  4 CPUs
      ends 2026-11-23 18:00:00 UTC, 59 min left
    ...

The allocation (``shoal.launch.allocation.discover``), this node, the launchers on PATH and
the address other nodes would reach this host at (the one `shoal head` binds to by default).
``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import time
from datetime import datetime
from typing import Any

# programs that can start an agent on another node, in the order `shoal info` lists them
LAUNCHERS = ("srun", "mpirun", "mpiexec", "pbsdsh", "ssh", "flux")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("info", help="show the allocation, this node, launchers and address found",
                       description="Print what shoal discovers here: the batch allocation (or "
                       "hostfile) and its nodes, this node, the launchers on PATH and the "
                       "address other nodes would reach this host at.")
    p.add_argument("--hostfile", metavar="FILE",
                   help="SCOOP-style hostfile ('host N' lines) instead of the batch system's")
    p.add_argument("--hosts", metavar="LIST", help="hosts instead of the batch system's: "
                   "'h1:4,h2:4' or 'h1 h2' (a host without :N uses its own cores)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=info_command)


def gather(env: dict[str, str] | None = None, hostfile: str | None = None,
           hosts: str | None = None) -> dict[str, Any]:
    """Everything `shoal info` shows, as plain data (what ``--json`` prints). Raises
    AllocationError when the allocation's description cannot be read."""
    from shoal.launch.allocation import discover, this_node
    from shoal.transport.connfile import host_address

    env = dict(os.environ if env is None else env)
    alloc = discover(env, hostfile=hostfile, hosts=hosts)
    here = this_node(env, hostfile=hostfile, hosts=hosts) if alloc is not None else None
    now = time.time()
    out: dict[str, Any] = {"host": socket.gethostname(), "allocation": None,
                           "local_default": None, "this_node": None}
    if alloc is None:
        out["local_default"] = {"cpus": os.cpu_count() or 1}
    else:
        out["allocation"] = {
            "kind": alloc.kind, "job_id": alloc.job_id, "source": alloc.source,
            "nodes": [_node(n) for n in alloc.nodes], "cpus": alloc.cpus, "gpus": alloc.gpus,
            "end_time": alloc.end_time,
            "end": _date(alloc.end_time) if alloc.end_time else None,
            "minutes_left": round((alloc.end_time - now) / 60, 1) if alloc.end_time else None}
        out["this_node"] = _node(here) if here is not None else None
    out["launchers"] = {name: shutil.which(name, path=env.get("PATH")) for name in LAUNCHERS}
    addr, how = host_address()
    out["address"] = {"address": addr, "found_by": how}
    return out


def _node(node: Any) -> dict[str, Any]:
    return {"name": node.name, "cpus": node.cpus, "gpus": list(node.gpus)}


def _date(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _cpus(n: int) -> str:
    return "its own cores (counted there)" if n == 0 else f"{n} CPU{'s' if n != 1 else ''}"


def render(info: dict[str, Any]) -> str:
    """The text `shoal info` prints for ``gather()``'s data."""
    lines = []
    a = info["allocation"]
    if a is None:
        lines.append("allocation: none (not inside a Slurm, PBS, SGE, LSF or Flux job; no "
                     "--hostfile or --hosts)")
        lines.append(f"  local default: this host, {info['local_default']['cpus']} CPUs "
                     "(os.cpu_count())")
    else:
        job = f" job {a['job_id']}" if a["job_id"] else ""
        lines.append(f"allocation: {a['kind']}{job} (from {a['source']}): {len(a['nodes'])} "
                     f"node{'s' if len(a['nodes']) != 1 else ''}, {a['cpus']} CPUs, {a['gpus']} GPUs")
        width = max(len(n["name"]) for n in a["nodes"])
        for n in a["nodes"]:
            gpus = f", GPUs {','.join(n['gpus'])}" if n["gpus"] else ""
            lines.append(f"  {n['name']:<{width}}  {_cpus(n['cpus'])}{gpus}")
        if a["end_time"]:
            lines.append(f"  ends {a['end']}, {a['minutes_left']:.0f} min left")
        else:
            lines.append("  end: not known")
        t = info["this_node"]
        if t is None:
            lines.append(f"this node: {info['host']}, not one of the allocation's nodes")
        else:
            gpus = f", GPUs {','.join(t['gpus'])}" if t["gpus"] else ""
            lines.append(f"this node: {t['name']}, {_cpus(t['cpus'])}{gpus}")
    found = [n for n, p in info["launchers"].items() if p]
    missing = [n for n, p in info["launchers"].items() if not p]
    lines.append(f"launchers: {', '.join(found) or 'none'}"
                 + (f" (not on PATH: {', '.join(missing)})" if missing else ""))
    ad = info["address"]
    lines.append(f"address: {ad['address']} (found by {ad['found_by']}; `shoal head` binds there)")
    return "\n".join(lines)


def info_command(args: argparse.Namespace) -> int:
    from shoal.launch.allocation import AllocationError

    try:
        info = gather(hostfile=args.hostfile, hosts=args.hosts)
    except AllocationError as exc:
        print(f"shoal info: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info, indent=1) if args.json else render(info))
    return 0
