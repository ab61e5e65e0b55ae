"""``python -m shoal.agent``: run a node agent (used by the local default and `shoal agent`).

Exit status: 0 after an orderly drain or shutdown, 2 for bad arguments or a bad connection
file, 3 when the head was lost (silent past its timeout, and no new head came back within
``--reconnect`` seconds).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from shoal.agent import limits
from shoal.agent.agent import Agent
from shoal.agent.headlink import EXIT_BAD_ARGS
from shoal.transport.connfile import Connection
from shoal.transport.session import server_key


def add_failure_options(ap: argparse.ArgumentParser) -> None:
    """The agent's options for leaving and for stopping tasks (shared with `shoal agent`)."""
    ap.add_argument("--walltime", metavar="TIME",
                    help="leave after TIME (seconds, H:M:S or D-H:M:S from start; the batch "
                         "job's end when SLURM_JOB_END_TIME is set, whichever is first): the "
                         "drain starts --drain-timeout before it")
    ap.add_argument("--drain-timeout", type=float, default=60.0, metavar="S",
                    help="when leaving, running tasks may finish for S seconds before they "
                         "are killed and handed back (default 60)")
    ap.add_argument("--reconnect", type=float, default=0.0, metavar="S",
                    help="when the head is lost, wait up to S seconds for a head restarted on "
                         "the same connection file instead of exiting (default 0: exit)")
    ap.add_argument("--kill-grace", type=float, default=3.0, metavar="S",
                    help="a command past its time limit gets SIGTERM, then SIGKILL after S "
                         "seconds (default 3)")


def add_resource_options(ap: argparse.ArgumentParser) -> None:
    """The agent's options for what it offers and how it runs tasks (shared with `shoal
    agent`); see shoal.agent.resources."""
    ap.add_argument("--gpus", metavar="N|IDS",
                    help="GPUs offered: a count (4: devices 0-3) or device ids (0,2,5) "
                         "(default: the job's CUDA_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES/"
                         "SLURM_JOB_GPUS, else nvidia-smi -L, else none)")
    ap.add_argument("--memory", metavar="SIZE",
                    help="memory offered to tasks that ask for some, e.g. 64GiB (default: the "
                         "Slurm job's on this node, else 0: not counted)")
    ap.add_argument("--mpi-launcher", choices=("mpirun", "srun"), default="mpirun",
                    help="how MPI tasks (ranks=) start: OpenMPI's mpirun --host (default), or "
                         "srun --nodelist inside a Slurm job")
    ap.add_argument("--idle-timeout", type=float, metavar="S",
                    help="leave (drain and exit 0) after S seconds with nothing to run "
                         "(pilot jobs; default: stay)")


def resource_kwargs(args: argparse.Namespace) -> dict[str, object]:
    """Agent keyword arguments from ``add_resource_options``; ValueError names a bad one."""
    from shoal.agent.resources import parse_gpus

    memory = None
    if args.memory is not None:
        memory = limits.parse_size(args.memory)
        if memory is None:  # "unlimited": nothing to count
            memory = 0
    if args.gpus is not None:
        parse_gpus(args.gpus)  # checked here, for a clear message before anything starts
    if args.idle_timeout is not None and not args.idle_timeout > 0:
        raise ValueError(f"--idle-timeout {args.idle_timeout:g}: must be more than 0 seconds")
    return {"gpus": args.gpus, "memory": memory, "mpi_launcher": args.mpi_launcher,
            "idle_timeout": args.idle_timeout}


def failure_kwargs(args: argparse.Namespace, connection_file: str) -> dict[str, object]:
    """Agent keyword arguments from ``add_failure_options``; ValueError names a bad one."""
    from shoal.agent.failures import parse_walltime

    for flag, value in (("--drain-timeout", args.drain_timeout), ("--reconnect", args.reconnect),
                        ("--kill-grace", args.kill_grace)):
        if not value >= 0:
            raise ValueError(f"{flag} {value:g}: must be 0 or more seconds")
    return {
        "walltime": parse_walltime(args.walltime) if args.walltime is not None else None,
        "drain_timeout": args.drain_timeout, "reconnect": args.reconnect,
        "kill_grace": args.kill_grace, "connection_file": connection_file,
    }


def main(argv: list[str] | None = None, connection: Connection | None = None) -> int:
    """``connection``: the head's connection, already read (shoal.launch.boot); else the
    ``--connection`` file is read."""
    ap = argparse.ArgumentParser(prog="python -m shoal.agent")
    ap.add_argument("--connection", required=True, help="connection file of the head")
    ap.add_argument("--slots", type=int, help="cores this agent offers (default: all)")
    ap.add_argument("--workers", type=int, help="warm Python workers (default: slots)")
    ap.add_argument("--name", help="agent name (default: agent-HOST-PID-XXXX)")
    ap.add_argument("--owner-pid", type=int, help="stop when this process dies")
    ap.add_argument("--sys-path", help="JSON list of import paths for workers")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--max-output", metavar="SIZE", help=limits.OUTPUT_HELP)
    ap.add_argument("--max-result", metavar="SIZE", help=limits.RESULT_HELP)
    add_failure_options(ap)
    add_resource_options(ap)
    args = ap.parse_args(argv)
    try:
        limits.check_counts(args.slots, args.workers)
        limits.configure(*limits.from_args(args.max_output, args.max_result))
        extra = failure_kwargs(args, args.connection)
        extra.update(resource_kwargs(args))
    except ValueError as exc:
        print(f"python -m shoal.agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="shoal agent: %(message)s")
    try:
        conn = connection if connection is not None else Connection.read(args.connection)
    except (OSError, ValueError) as exc:
        print(f"python -m shoal.agent: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGS
    try:
        agent = Agent(conn.address, conn.key, slots=args.slots, workers=args.workers,
                      name=args.name, owner_pid=args.owner_pid,
                      sys_path=json.loads(args.sys_path) if args.sys_path else None,
                      server_key=server_key(conn), **extra)  # type: ignore[arg-type]
    except ValueError as exc:
        print(f"python -m shoal.agent: {exc}", file=sys.stderr)
        return 2
    # what `shoal.SIZE` (SCOOP's scoop.SIZE) reads in its tasks: its workers inherit it
    os.environ["SHOAL_AGENT_WORKERS"] = str(agent.nworkers)
    agent.run()
    return agent.exit_code


if __name__ == "__main__":
    sys.exit(main())
