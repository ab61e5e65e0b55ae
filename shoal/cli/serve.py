"""``shoal serve``: the HTTP service for scripts (see docs/serve.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register the ``serve`` sub-command."""
    p = subparsers.add_parser(
        "serve",
        help="HTTP service: run submitted scripts next to the data, each in a sandbox",
        description="Serve an HTTP API (and a small web page) that accepts shell scripts, "
                    "compiles them in strict mode and runs each in its own sandbox with the "
                    "data directory read-only; clients download only the results.",
    )
    p.add_argument("--data", required=True, metavar="DIR",
                   help="the data directory scripts read (read-only for them)")
    p.add_argument("--listen", default="127.0.0.1:8642", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:8642; port 0 picks a free one)")
    p.add_argument("--jobs", default="shoal-jobs", metavar="DIR",
                   help="job store: the SQLite table and one directory per job "
                        "(default ./shoal-jobs)")
    p.add_argument("--tokens", metavar="FILE",
                   help="tokens file (TOML, see docs/serve.md; default JOBS/tokens.toml, "
                        "created with one token if missing)")
    p.add_argument("--new-token", metavar="NAME",
                   help="print a new token and the tokens-file table that admits it, and exit")
    p.add_argument("--max-upload", default="256M", metavar="SIZE",
                   help="largest request body: script plus inputs (default 256M)")
    p.add_argument("--max-running", type=int, default=2, metavar="N",
                   help="jobs running at once; more wait in order (default 2)")
    p.add_argument("--cpu", type=float, metavar="SECONDS", help="CPU time limit of a job")
    p.add_argument("--memory", metavar="SIZE", help="memory limit of a job")
    p.add_argument("--nprocs", type=int, metavar="N", help="process limit of a job")
    p.add_argument("--wall", type=float, metavar="SECONDS", help="wall time limit of a job")
    p.add_argument("--output", metavar="SIZE", help="output size limit of a job")
    p.add_argument("--workers", type=int, metavar="N", help="commands a job runs at once")
    p.add_argument("--no-resume", dest="resume", action="store_false",
                   help="after a restart, mark the jobs that were running failed instead of "
                        "resuming them (docs/serve.md, Restarts)")
    p.add_argument("--connect", metavar="FILE",
                   help="run the jobs' commands on the agents of a running `shoal head` (its "
                        "connection file), each in a sandbox on its node; --jobs must then be "
                        "on a file system the agents' nodes share (docs/serve.md)")
    p.add_argument("--certfile", metavar="PEM", help="serve HTTPS with this certificate chain")
    p.add_argument("--keyfile", metavar="PEM", help="... and this private key")
    p.set_defaults(func=main)


def _fail(msg: str) -> int:
    print(f"shoal serve: error: {msg}", file=sys.stderr)
    return 2


def main(args: argparse.Namespace) -> int:
    """Run the service until SIGINT/SIGTERM."""
    from shoal.service.tokens import Tokens, TokensError, new_token, parse_size

    if args.new_token:
        try:
            tok, table = new_token(args.new_token)
        except ValueError as exc:
            return _fail(str(exc))
        print(f"token: {tok}\n\n# add to the tokens file:\n{table}", end="")
        return 0
    try:
        from aiohttp import web  # noqa: F401
    except ImportError:
        return _fail("the service needs aiohttp: pip install 'shoal[serve]'")
    from shoal.service.sandbox import Limits, run_job

    data = Path(args.data).resolve()
    if not data.is_dir():
        return _fail(f"--data {args.data}: not a directory")
    host, sep, port_s = args.listen.rpartition(":")
    if not sep or not port_s.isdigit() or int(port_s) > 65535:
        return _fail(f"--listen {args.listen!r}: expected HOST:PORT, like 127.0.0.1:8642")
    host = host.strip("[]") or "127.0.0.1"
    if bool(args.certfile) != bool(args.keyfile):
        return _fail("give both --certfile and --keyfile, or neither")
    if args.max_running < 1:
        return _fail(f"--max-running {args.max_running}: must be 1 or more")
    jobs = Path(args.jobs).resolve()
    try:
        jobs.mkdir(parents=True, exist_ok=True)
        max_upload = parse_size(args.max_upload, "--max-upload")
        over: dict[str, object] = {}
        if args.cpu is not None:
            over["cpu_s"] = args.cpu
        if args.memory is not None:
            over["memory_bytes"] = parse_size(args.memory, "--memory")
        if args.nprocs is not None:
            over["nprocs"] = args.nprocs
        if args.wall is not None:
            over["wall_s"] = args.wall
        if args.output is not None:
            over["output_bytes"] = parse_size(args.output, "--output")
        if args.workers is not None:
            over["workers"] = args.workers
        limits = Limits(**over)  # type: ignore[arg-type]
    except (ValueError, OSError) as exc:
        return _fail(str(exc))
    tokens_path = Path(args.tokens) if args.tokens else jobs / "tokens.toml"
    if not args.tokens and not tokens_path.exists():
        tok, table = new_token("admin")
        fd = os.open(tokens_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(table)
        print(f"shoal serve: created {tokens_path} with one token (only its SHA-256 is "
              f"stored); token for 'admin': {tok}", file=sys.stderr)
    try:
        tokens = Tokens.load(str(tokens_path))
    except TokensError as exc:
        return _fail(str(exc))
    ssl_ctx = None
    if args.certfile:
        import ssl

        ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ssl_ctx.load_cert_chain(args.certfile, args.keyfile)
        except (OSError, ssl.SSLError) as exc:
            return _fail(f"--certfile/--keyfile: {exc}")
    from shoal.service import sandbox
    from shoal.service.app import create_app

    problems = sandbox.check()
    if problems:
        return _fail(f"the job sandbox cannot run here: {problems[0]}")
    print(f"shoal serve: sandbox: {sandbox.describe()}", file=sys.stderr)
    if args.connect:
        run_job = _connected(args.connect, jobs, data)  # type: ignore[assignment]
        if run_job is None:
            return 2

    app = create_app(data_dir=data, jobs_dir=jobs, tokens=tokens, limits=limits,
                     run_job=run_job, max_upload=max_upload, max_running=args.max_running,
                     data_root=sandbox.DATA,
                     # --connect: a killed service's commands may run on the agents until the
                     # head notices (its heartbeat timeout): its jobs are failed, not resumed
                     resume=args.resume and not args.connect)
    return asyncio.run(_serve(app, host, int(port_s), ssl_ctx))


def _connected(connect: str, jobs: Path, data: Path) -> object | None:
    """``run_job`` for ``--connect`` after checking every agent (None: a one-line error was
    printed)."""
    import functools

    from shoal.service.connect import check_agents, run_job_connected

    if not Path(connect).is_file():
        _fail(f"--connect {connect}: no such connection file")
        return None
    problems, agents = check_agents(str(Path(connect).resolve()), jobs, data)
    if problems:
        _fail(f"--connect {connect}: {problems[0]}"
              + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        return None
    print(f"shoal serve: commands run on the runtime at {connect}: "
          + (f"{len(agents)} agent(s) checked ({', '.join(agents)})" if agents else
             "no agent yet (jobs wait until one joins)"), file=sys.stderr)
    return functools.partial(run_job_connected, connect=str(Path(connect).resolve()))


async def _serve(app: object, host: str, port: int, ssl_ctx: object) -> int:
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)  # type: ignore[arg-type]
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_ctx)  # type: ignore[arg-type]
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        return _fail(f"--listen {host}:{port}: {exc.strerror or exc}")
    server = site._server
    sock = server.sockets[0] if server and server.sockets else None  # type: ignore[attr-defined]
    bound = sock.getsockname() if sock else (host, port)
    h = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    scheme = "https" if ssl_ctx else "http"
    print(f"shoal serve: listening on {scheme}://{h}:{bound[1]}/", flush=True)
    if scheme == "http" and bound[0] not in ("127.0.0.1", "::1", "localhost"):
        print("shoal serve: warning: plain HTTP on a non-loopback address: tokens and data "
              "cross the network in clear (use --certfile/--keyfile or a TLS proxy)",
              file=sys.stderr)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    return 0
