"""One command of a ``shoal serve --connect`` job, sandboxed on the agent's node.

The service runs a job's commands on the agents of an existing runtime. Each command is a
Python task, :func:`task_run`, that the agent runs in one of its warm workers (as the agent's
user, root): it runs the command in the same sandbox as a local job (``docs/sandbox.md``:
bubblewrap, the job user, seccomp, no network, ``JOB_DIR/work`` read-write at ``/work``, the
data read-only at ``/data``), in control groups of its own named ``...-TAG`` (the job's
memory and process limits), with its CPU time and wall time watched, and returns how it
ended: ``{"exit": N, "reason": None | "one line", "cpu": seconds, "wall": seconds,
"output": the command's stdout and stderr (at most ``max_log`` bytes)}``. A warm worker
costs no interpreter start per command; the sandbox's own start is tens of milliseconds.

A cancel kills the worker (the agent replaces it); the sandbox goes with it (parent-death
signals, as when a service dies), and :func:`task_sweep` (which the service runs on every
agent after a cancel) or the next probe of the node removes what is left in the groups.
:func:`task_check` is what the service asks each agent at its start. A command does not
start when ``JOB_DIR/stop`` exists (the service writes it before it cancels the job's
commands): one that reaches a node after the cancel never runs.

``python -m shoal.service.sandbox_cmd run|check|sweep ...`` does the same from a shell (the
command's output on stderr, the result as one JSON line on stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .sandbox import (
    _JOIN,
    WORK,
    Limits,
    SandboxError,
    _bwrap_args,
    _kill,
    _overlap,
    _read_info,
    _reap,
    _rlimits,
    _secs,
    _size,
    _smoke,
    _validate,
)
from .sandbox_host import Host, JobCgroups, host, kill_tagged, reprobe

STOP = "stop"          # JOB_DIR/stop: the job was cancelled; commands must not start
MAX_LOG = 1 << 20      # bytes of a command's own output passed back (chains write little)


def _where() -> str:
    return socket.gethostname()


class _Pump(threading.Thread):
    """Keeps the command's output, at most ``cap`` bytes, and drains the rest (so the command
    never blocks on a full pipe)."""

    def __init__(self, fd: int, cap: int) -> None:
        super().__init__(daemon=True, name="sandbox-cmd-out")
        self.fd, self.cap, self.dropped = fd, cap, 0
        self.out = bytearray()

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            keep = chunk[: max(0, self.cap - len(self.out))]
            self.dropped += len(chunk) - len(keep)
            self.out += keep
        os.close(self.fd)


def run_command(argv: list[str], *, job_dir: Path, data_dir: Path, limits: Limits, tag: str,
                cwd: str = WORK, max_log: int = MAX_LOG,
                stop: threading.Event | None = None) -> dict:
    """Run ``argv`` in the job's sandbox on this node; how it ended (module docstring).
    Setting ``stop`` stops it."""
    res = _run_command(argv, job_dir=job_dir, data_dir=data_dir, limits=limits, tag=tag,
                       cwd=cwd, max_log=max_log, stop=stop)
    res.setdefault("output", b"")
    return res


def _run_command(argv: list[str], *, job_dir: Path, data_dir: Path, limits: Limits, tag: str,
                 cwd: str, max_log: int, stop: threading.Event | None) -> dict:
    _validate(limits)
    h = host()
    problems = h.problems()
    if problems:
        return {"exit": 125, "reason": f"sandbox unavailable on {_where()}: {problems[0]}"}
    job_dir, data_dir = job_dir.resolve(), data_dir.resolve()
    if not (job_dir / "work").is_dir():
        return {"exit": 125, "reason": f"sandbox: the job directory {str(job_dir)!r} is not "
                                       f"visible on {_where()} (--jobs must be on a file "
                                       "system every agent's node shares)"}
    if not data_dir.is_dir():
        return {"exit": 125, "reason": f"sandbox: the data directory {str(data_dir)!r} is not "
                                       f"visible on {_where()}"}
    bad = _overlap(job_dir, data_dir, job_dir / "log")
    if bad:
        return {"exit": 125, "reason": f"sandbox: {bad}"}
    if cwd != WORK and not cwd.startswith(WORK + "/"):
        return {"exit": 125, "reason": f"sandbox: a command's directory must be below {WORK}, "
                                       f"not {cwd!r}"}
    cg: JobCgroups | None = None
    try:
        cg = JobCgroups(h, limits.memory_bytes, limits.nprocs, tag)
    except OSError:
        h = reprobe()
        try:
            cg = JobCgroups(h, limits.memory_bytes, limits.nprocs, tag)
        except OSError:
            cg = None  # rlimits only (as a local job without groups)
    fds: list[int] = []
    try:
        # after the groups exist: a sweep that missed them saw the marker's effect here
        if (job_dir / STOP).exists():
            return {"exit": 137, "reason": "cancelled"}
        info_r, info_w = os.pipe()
        fds.append(info_w)
        try:
            bw = _bwrap_args(h, job_dir, data_dir, limits, None, fds, info_w, chdir=cwd,
                             python=False)
        except SandboxError as exc:
            os.close(info_r)
            return {"exit": 125, "reason": f"sandbox: {exc}"}
        return _supervise(h, cg, bw + argv, fds, info_r, limits, max_log,
                          stop or threading.Event())
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if cg is not None:
            cg.remove()


def _supervise(h: Host, cg: JobCgroups | None, cmd: list[str], fds: list[int], info_r: int,
               limits: Limits, max_log: int, stop: threading.Event) -> dict:
    join = [h.setpriv or "setpriv", "--pdeathsig", "KILL", "--", "/bin/sh", "-c", _JOIN, "sh",
            str(os.getpid()), *(cg.procs_files() if cg else []), "--"]
    out_r, out_w = os.pipe()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(join + _rlimits(h, cg, limits) + cmd, stdin=subprocess.DEVNULL,
                                stdout=out_w, stderr=out_w, pass_fds=tuple(fds),
                                start_new_session=True,
                                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
    except OSError as exc:
        for fd in (out_r, out_w, info_r):
            os.close(fd)
        return {"exit": 125, "reason": f"sandbox: cannot start on {_where()}: {exc}"}
    os.close(out_w)
    for fd in fds:
        os.close(fd)
    fds.clear()
    init = _read_info(info_r)
    pump = _Pump(out_r, max_log)
    pump.start()
    try:  # wakes the moment the command ends (Popen.wait(timeout) polls with sleeps)
        pidfd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        reason = _watch(proc, pidfd, cg, limits, stop, t0)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    rc = proc.wait()
    _reap(cg, init)
    pump.join(timeout=5)
    if reason is None and cg is not None:
        if cg.oom_kills():
            reason = f"memory limit {_size(limits.memory_bytes)} exceeded"
        elif cg.pids_max_hits():
            reason = f"process limit {limits.nprocs} reached"
    if reason is None and rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        reason = f"CPU time limit {_secs(limits.cpu_s)} exceeded"
    cpu = cg.cpu_seconds() if cg is not None else None
    code = 137 if reason is not None else (128 - rc if rc < 0 else rc)
    out: dict = {"exit": code, "reason": reason, "cpu": cpu,
                 "wall": round(time.monotonic() - t0, 3), "output": bytes(pump.out)}
    if pump.dropped:
        out["output"] += f"\n[{pump.dropped} more bytes of output dropped]\n".encode()
    return out



def _watch(proc: subprocess.Popen, pidfd: int | None, cg: JobCgroups | None, limits: Limits,
           stop: threading.Event, t0: float) -> str | None:
    """Wait for the command, looking at its limits every 50 ms; why it was killed, or None."""
    while True:
        if pidfd is not None:
            select.select([pidfd], [], [], 0.05)
            if proc.poll() is not None:
                return None
        else:
            try:
                proc.wait(timeout=0.05)
                return None
            except subprocess.TimeoutExpired:
                pass
        reason = None
        if stop.is_set():
            reason = "stopped"
        elif time.monotonic() - t0 > limits.wall_s:
            reason = f"wall time limit {_secs(limits.wall_s)} reached"
        elif cg is not None and (cpu := cg.cpu_seconds()) is not None and cpu > limits.cpu_s:
            reason = f"CPU time limit {_secs(limits.cpu_s)} exceeded"
        elif cg is not None and cg.oom_kills():
            reason = f"memory limit {_size(limits.memory_bytes)} exceeded"
        elif cg is not None and cg.pids_max_hits():
            reason = f"process limit {limits.nprocs} reached"
        if reason is not None:
            _kill(proc, cg)
            return reason

def check(jobs_dir: Path, probe: str, data_dir: Path) -> list[str]:
    """What keeps this node from running the service's commands (empty: nothing)."""
    where = _where()
    problems = [f"{where}: {p}" for p in host().problems()]
    if problems:
        return problems
    if not (jobs_dir / probe).is_file():
        problems.append(f"{where}: the jobs directory {str(jobs_dir)!r} is not the service's "
                        "here (--jobs must be on a file system the agents' nodes share, at "
                        "the same path)")
    if not data_dir.is_dir():
        problems.append(f"{where}: the data directory {str(data_dir)!r} is missing here "
                        "(--data must be at the same path on the agents' nodes)")
    if not problems:
        msg = _smoke()
        if msg:
            problems.append(f"{where}: {msg}")
    return problems


def task_run(argv: list[str], job_dir: str, data_dir: str, limits: dict, tag: str,
             cwd: str = WORK, max_log: int = MAX_LOG) -> dict:
    """The task the service submits per command: :func:`run_command` in an agent's worker;
    ``limits``: the fields of :class:`Limits`."""
    try:
        lim = Limits(**limits)
        return run_command(list(argv), job_dir=Path(job_dir), data_dir=Path(data_dir),
                           limits=lim, tag=tag, cwd=cwd, max_log=max_log)
    except (TypeError, ValueError) as exc:  # the service's mistake: one line
        return {"exit": 125, "reason": f"sandbox: {exc}"}


def task_check(jobs_dir: str, probe: str, data_dir: str) -> list[str]:
    """The task the service submits to each agent at its start: :func:`check`."""
    return check(Path(jobs_dir), probe, Path(data_dir))


def task_sweep(tag: str) -> int:
    """The task the service submits to each agent after a cancel: kill what is left in this
    node's groups of job ``tag``; how many processes there were."""
    return kill_tagged(host(), tag)


def _limits(a: argparse.Namespace) -> Limits:
    return Limits(cpu_s=a.cpu, memory_bytes=a.memory, nprocs=a.nprocs, wall_s=a.wall,
                  output_bytes=a.output, workers=1)


def main(argv: list[str] | None = None) -> int:
    """The three sub-commands (module docstring); prints one JSON line on stdout."""
    argv = sys.argv[1:] if argv is None else argv
    inner: list[str] = []
    if "--" in argv:  # everything after the first `--` is the command, untouched
        k = argv.index("--")
        argv, inner = argv[:k], argv[k + 1:]
    p = argparse.ArgumentParser(prog="shoal.service.sandbox_cmd")
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("--job-dir", type=Path, required=True)
    r.add_argument("--data", type=Path, required=True)
    r.add_argument("--tag", required=True)
    r.add_argument("--cwd", default=WORK)
    r.add_argument("--cpu", type=float, default=Limits.cpu_s)
    r.add_argument("--memory", type=int, default=Limits.memory_bytes)
    r.add_argument("--nprocs", type=int, default=Limits.nprocs)
    r.add_argument("--wall", type=float, default=Limits.wall_s)
    r.add_argument("--output", type=int, default=Limits.output_bytes)
    r.add_argument("--max-log", type=int, default=MAX_LOG)
    c = sub.add_parser("check")
    c.add_argument("--job-dir", type=Path, required=True)
    c.add_argument("--probe", required=True)
    c.add_argument("--data", type=Path, required=True)
    s = sub.add_parser("sweep")
    s.add_argument("--tag", required=True)
    a = p.parse_args(argv)
    if a.what == "check":
        print(json.dumps({"problems": check(a.job_dir, a.probe, a.data)}), flush=True)
        return 0
    if a.what == "sweep":
        print(json.dumps({"killed": kill_tagged(host(), a.tag)}), flush=True)
        return 0
    if not inner:
        p.error("run: no command after --")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    try:
        res = run_command(inner, job_dir=a.job_dir, data_dir=a.data, limits=_limits(a),
                          tag=a.tag, cwd=a.cwd, max_log=a.max_log, stop=stop)
    except ValueError as exc:  # a bad tag or limit: one line
        res = {"exit": 125, "reason": f"sandbox: {exc}"}
    os.write(2, res.pop("output", b""))
    print(json.dumps(res), flush=True)
    return int(res["exit"]) if 0 <= int(res["exit"]) < 256 else 1


if __name__ == "__main__":
    sys.exit(main())
