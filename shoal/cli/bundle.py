"""`shoal bundle`, `shoal bcast`, `shoal env`: fast start from node-local copies.

    shoal bundle --out ~/.shoal/bundles [--app DIR] [--pip REQ]...   # prints bundle paths
    shoal bcast BUNDLE... --to /dev/shm/$USER/shoal [--transport auto|agents|mpi|sbcast|local]
    shoal bcast BUNDLE... --to /dev/shm/$USER/shoal --connect run.json   # through shoal's agents
    eval "$(shoal env --root /dev/shm/$USER/shoal --trap)"
    shoal bcast --cleanup --to /dev/shm/$USER/shoal
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys


def add_parser(subparsers) -> None:
    """Register `bundle`, `bcast` and `env` on an argparse sub-parsers object."""
    b = subparsers.add_parser("bundle", help="build tiered environment bundles (unchanged tiers are reused)",
                              description="Build tier 1 (interpreter + stdlib), tier 2 (packages) and "
                              "tier 3 (--app DIR) bundles; print their paths, one a line, in overlay order.")
    b.add_argument("--out", required=True, help="directory for the bundle files")
    b.add_argument("--python", help="interpreter whose environment to bundle (default: this one)")
    b.add_argument("--tiers", default="python,packages",
                   help="comma-separated: python, packages, pip, app (default: python,packages)")
    b.add_argument("--app", help="application directory: tier 3, unpacked at ROOT/app")
    b.add_argument("--pip", action="append", default=[], metavar="REQ",
                   help="requirement for a pip-installed tier-2 bundle (repeatable)")
    b.add_argument("--level", type=int, default=3, help="zstd level (default 3)")
    b.add_argument("--threads", type=int, default=0, help="zstd worker threads (0: none, -1: all cores)")
    b.add_argument("--force", action="store_true", help="rebuild even when unchanged")
    b.add_argument("--no-shoal", action="store_true", help="do not add shoal itself to tier 2")
    b.add_argument("--json", action="store_true", help="print a JSON report instead of paths")
    b.set_defaults(func=cmd_bundle)

    c = subparsers.add_parser("bcast", help="deliver bundles to node-local storage on every node",
                              description="Deliver bundles to DEST on every node (one receiver per node), "
                              "checksums verified, later bundles overlaying earlier ones, installed "
                              "atomically and private to the user.")
    c.add_argument("bundles", nargs="*", help="bundle files (.tar.zst), in overlay order")
    c.add_argument("--to", required=True, help="node-local destination, e.g. /dev/shm/$USER/shoal "
                   "(agents: may contain {agent} and {host})")
    c.add_argument("--transport", default="auto", choices=("auto", "local", "mpi", "sbcast", "agents"),
                   help="auto: agents with --connect/$SHOAL_CONNECT, else mpi, sbcast or local")
    c.add_argument("--connect", metavar="FILE", help="agents: connection file of a running `shoal head` "
                   "(default $SHOAL_CONNECT); one receiver per agent's node")
    c.add_argument("--chunk-mb", type=float, default=8, help="agents: bytes per task (default 8 MiB)")
    c.add_argument("--fresh", action="store_true", help="replace what DEST holds instead of overlaying it")
    c.add_argument("--cleanup", action="store_true", help="remove DEST on every node and exit")
    c.add_argument("--mpirun", help="launcher for --transport mpi (default $SHOAL_MPIRUN or "
                   "'mpirun --map-by ppr:1:node')")
    c.add_argument("--receivers", default="per-node", choices=("per-node", "per-rank"),
                   help="MPI: one receiver per node (default) or per rank (DEST may contain {rank})")
    c.add_argument("--json", action="store_true", help="MPI, agents: print per-receiver timings as JSON")
    c.set_defaults(func=cmd_bcast)

    e = subparsers.add_parser("env", help="print shell exports that reroute Python to a local copy",
                              description='Use as: eval "$(shoal env --root /dev/shm/$USER/shoal)"')
    e.add_argument("--root", required=True, help="where `shoal bcast --to` put the bundles")
    e.add_argument("--trap", action="store_true", help="also remove the local copies when the shell exits")
    e.add_argument("--safe-path", action="store_true", help="PYTHONSAFEPATH=1: no cwd/script dir on sys.path")
    e.add_argument("--json", action="store_true", help="print the rerouted environment's changes as JSON")
    e.set_defaults(func=cmd_env)


def _fail(msg: str) -> int:
    print(f"shoal: {msg}", file=sys.stderr)
    return 1


def cmd_bundle(args: argparse.Namespace) -> int:
    """Build or reuse bundles; print their paths (stdout) and what was done (stderr)."""
    from shoal.bundle import BundleError, build

    tiers = [t.strip() for t in args.tiers.split(",") if t.strip()]
    try:
        results = build(args.out, python=args.python, tiers=tiers, app=args.app, pip=args.pip,
                        level=args.level, threads=args.threads, force=args.force,
                        include_shoal=not args.no_shoal)
    except BundleError as exc:
        return _fail(f"bundle: {exc}")
    for r in results:
        for w in r.warnings:
            print(f"shoal bundle: warning: {r.tier}: {w}", file=sys.stderr)
        state = "built" if r.built else "unchanged"
        print(f"shoal bundle: {r.tier}: {state}, {r.nbytes / 1e6:.1f} MB, {r.seconds:.2f} s", file=sys.stderr)
    if args.json:
        print(json.dumps([{"tier": r.tier, "path": str(r.path), "built": r.built, "bytes": r.nbytes,
                           "seconds": r.seconds, "warnings": r.warnings} for r in results]))
    else:
        for r in results:
            print(r.path)
    return 0


def cmd_bcast(args: argparse.Namespace) -> int:
    """Deliver (or with --cleanup remove) bundles on every node."""
    from shoal.bundle import BundleError
    from shoal.bundle.transport import deliver, remove_everywhere

    mpirun = shlex.split(args.mpirun) if args.mpirun else None
    try:
        if args.cleanup:
            if args.bundles:
                return _fail("bcast --cleanup takes no bundle files")
            rep = remove_everywhere(args.to, args.transport, mpirun=mpirun, receivers=args.receivers,
                                    connect=args.connect)
        else:
            if not args.bundles:
                return _fail("bcast: no bundle files given")
            rep = deliver(args.bundles, args.to, args.transport, fresh=args.fresh, mpirun=mpirun,
                          receivers=args.receivers, json_out=args.json, connect=args.connect,
                          chunk_size=int(args.chunk_mb * (1 << 20)))
    except BundleError as exc:
        return _fail(f"bcast: {exc}")
    for err in rep.errors:
        print(f"shoal bcast: {err}", file=sys.stderr)
    if args.json and rep.transport == "agents":
        print(json.dumps({"transport": rep.transport, "seconds": rep.seconds, "status": rep.status,
                          "bytes": rep.nbytes, "send_s": rep.send_s, "errors": rep.errors, "nodes": rep.nodes}))
    if rep.status == 0 and rep.transport != "mpi":
        what = "removed" if args.cleanup else "delivered to"
        nodes = f" on {len(rep.nodes)} nodes" if rep.nodes else ""
        print(f"shoal bcast: {what} {args.to} via {rep.transport}{nodes} in {rep.seconds:.2f} s", file=sys.stderr)
    return rep.status


def cmd_env(args: argparse.Namespace) -> int:
    """Print the exports that run Python from the bundle root."""
    import os

    from shoal.bundle import BundleError, rerouted_environ, shell_exports

    try:
        if args.json:
            env = rerouted_environ(args.root, safe_path=args.safe_path)
            changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
            removed = sorted(k for k in os.environ if k not in env)
            print(json.dumps({"set": changed, "unset": removed}, indent=1))
        else:
            sys.stdout.write(shell_exports(args.root, safe_path=args.safe_path, trap=args.trap))
    except BundleError as exc:
        return _fail(f"env: {exc}")
    return 0
