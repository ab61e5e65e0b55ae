"""Run one script job in a sandbox: its own directory, read-only data, no network, limits.

:func:`run_job` compiles a script in strict mode (unknown programs refused) and runs it with a
local shoal runtime, all inside one bubblewrap sandbox (``docs/sandbox.md``):

* namespaces: mount (a new root holding only the tools read-only, ``/data`` read-only, the
  job's ``work`` directory at ``/work``, private ``/tmp`` and ``/dev/shm`` of bounded size),
  network (loopback only: shoal's head and agent talk over it), PID (the job sees only its own
  processes; killing the sandbox's first process ends every other), IPC, UTS;
* an unprivileged user (``shoal-job``) with no capabilities, ``no_new_privs``, a seccomp
  filter (``sandbox_seccomp.py``);
* limits: memory and process count by control group where this machine allows it (else
  rlimits), CPU time of the whole job (cgroup accounting, checked while it runs; an rlimit per
  process as a backstop), wall time, output size (files under ``work`` plus the log: checked
  while it runs, with ``RLIMIT_FSIZE`` capping any single file).

The job's first process (a small shell run as root outside the sandbox) joins the job's
control groups, then runs ``prlimit`` -> ``bwrap`` -> ``setpriv`` (drop to the job user) ->
the program. :func:`run_sandboxed` runs any command that way (tests use it to show that the
namespaces themselves, not only the compiler, stop a hostile command).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .sandbox_host import Host, JobCgroups, host, reprobe

DATA = "/data"           # where the data directory appears inside the sandbox
WORK = "/work"           # the job's working tree (its outputs), job_dir/work outside
SCRIPT = "/job/script"   # the script, read-only
STATE = "/job/state"     # a resumable job's plan and journal (job_dir/state), see run_job
SHOAL = "/opt/shoal"     # PYTHONPATH: the shoal package that runs the job, read-only
ENTRY_MIN = 4096         # every file counts at least this much against the output limit
_ETC = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
        "nsswitch.conf", "host.conf", "mime.types")


@dataclass(frozen=True)
class Limits:
    """What one job may use. ``workers``: clusters of the script run at once."""

    cpu_s: float = 600
    memory_bytes: int = 2 << 30
    nprocs: int = 256
    wall_s: float = 3600
    output_bytes: int = 1 << 30
    workers: int = 2


@dataclass
class JobResult:
    """How a job ended.

    ``returncode``: the script's exit status as bash would give it; 2 when the compiler refused
    the script; 137 when the sandbox stopped it (a limit, or cancel); 125 when the sandbox could
    not start. ``reason``: None, or one line saying why it was refused or stopped.
    """

    returncode: int
    reason: str | None


class SandboxError(RuntimeError):
    """The sandbox cannot run here (bubblewrap missing, ...)."""


class Companion(Protocol):
    """Works for a job outside its sandbox while it runs (``shoal serve --connect``: the
    bridge that runs the job's commands on a runtime's agents, ``connect.py``)."""

    child_fds: list[int]  # passed into the sandbox, closed here once it started

    def reason(self) -> str | None:
        """Why the job must stop now (a limit seen outside), or None; polled every 50 ms."""
        ...

    def finish(self) -> None:
        """The sandbox is gone: stop and clean up what runs elsewhere for the job."""
        ...


def check() -> list[str]:
    """Problems that stop every job on this machine (empty: ready). For a service at start.

    Besides the programs and privileges it needs, it starts one sandbox running ``true``
    (about 50 ms): a container may forbid namespaces or mounts (Docker's default seccomp
    profile does), which only trying shows.
    """
    problems = host().problems()
    if not problems:
        msg = _smoke()
        if msg:
            problems.append(msg)
    return problems


def _smoke() -> str | None:
    """Run ``true`` in a sandbox like a job's (no limits); None if it worked."""
    import tempfile

    h = host()
    with tempfile.TemporaryDirectory(prefix="shoal-sandbox-check-") as d:
        job, data = Path(d) / "job", Path(d) / "data"
        data.mkdir()
        fds: list[int] = []
        try:
            _prepare_work(job / "work", h)
            args = _bwrap_args(h, job, data, Limits(), None, fds) + ["/bin/true"]
            r = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True,
                               pass_fds=tuple(fds), timeout=60)
        except (OSError, SandboxError, subprocess.TimeoutExpired) as exc:
            return f"the sandbox cannot start here: {exc}"
        finally:
            for fd in fds:
                os.close(fd)
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace").strip().splitlines()
        return (f"the sandbox cannot start here (bwrap exit status {r.returncode}"
                f"{': ' + err[-1] if err else ''})")
    return None


def describe() -> str:
    """One line: how this machine enforces each limit."""
    return host().describe()


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def _secs(s: float) -> str:
    return f"{s:g} s"


def run_job(script: Path, args: list[str], *, job_dir: Path, data_dir: Path, limits: Limits,
            log: Path, cancel: threading.Event | None = None,
            resumable: bool = False) -> JobResult:
    """Compile ``script`` in strict mode and run it with ``args`` in a sandbox.

    The job works in ``job_dir/work`` (made if missing; its outputs stay there) and sees
    ``data_dir`` read-only at ``/data``. Its output, the runner's progress lines and the
    sandbox's own lines are appended to ``log``. Setting ``cancel`` stops it at once.

    ``resumable``: the runner keeps the compiled plan and the head's journal in
    ``job_dir/state`` (``/job/state`` inside, out of the commands' reach: strict mode lets a
    command change nothing outside ``/work``) and its run directory in ``work``; a later call
    for the same job (after the service was killed) runs the same plan again and skips the
    commands that finished. A stopped resumable job keeps that run directory: the caller
    removes it (``JobManager`` does, when the job ends for good).
    """
    if not Path(script).is_file():
        return JobResult(125, f"sandbox: script {str(script)!r} not found")

    def argv(status_fd: int) -> list[str]:
        return [_python(), "-s", "-m", "shoal.service.sandbox_job", "--status-fd",
                str(status_fd), "--workers", str(limits.workers), "--name", script.name,
                *(["--state", STATE] if resumable else []), SCRIPT, "--", *args]

    return _run(argv, job_dir=job_dir, data_dir=data_dir, limits=limits, log=log,
                cancel=cancel, script=script, resumable=resumable)


def run_sandboxed(argv: list[str], *, job_dir: Path, data_dir: Path, limits: Limits,
                  log: Path, cancel: threading.Event | None = None) -> JobResult:
    """Run ``argv`` (a program and its arguments, as seen inside) in a job's sandbox."""
    return _run(lambda fd: list(argv), job_dir=job_dir, data_dir=data_dir, limits=limits,
                log=log, cancel=cancel, script=None)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _prepare_work(work: Path, h: Host) -> None:
    work.mkdir(parents=True, exist_ok=True)
    # the job user owns its tree (uploaded inputs included); nothing else of job_dir
    for dirpath, dirnames, filenames in os.walk(work):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), h.uid, h.gid)
    os.lchown(work, h.uid, h.gid)
    os.chmod(work, 0o700)


def _python() -> str:
    """The interpreter that runs shoal, without its virtual environment (whose packages are
    bound below ``/opt/shoal``): the real file, under ``sys.base_prefix``."""
    return os.path.realpath(sys.executable)


def _python_binds() -> list[tuple[str, str]]:
    """(host path, sandbox path) of what the interpreter and shoal need, read-only.

    The base installation keeps its path (its files name each other absolutely); the
    environment's site-packages and the shoal package go below ``/opt/shoal`` (PYTHONPATH),
    so a virtual environment anywhere (even below a path the sandbox uses) works.
    """
    import site

    import shoal

    out: list[tuple[str, str]] = []
    base = os.path.realpath(sys.base_prefix)
    exe_root = os.path.dirname(os.path.dirname(_python()))
    for p in (base, exe_root):
        if p in ("/", "/usr") or p.startswith("/usr/"):
            continue
        for fixed in (DATA, WORK, "/job", SHOAL, "/tmp", "/proc", "/dev", "/etc"):
            if p == fixed or p.startswith(fixed + "/") or fixed.startswith(p + "/"):
                raise SandboxError(f"the Python installation {p!r} overlaps the sandbox's "
                                   f"{fixed!r}")
        if not any(p == q or p.startswith(q + "/") for q, _ in out):
            out.append((p, p))
    pkg = os.path.dirname(os.path.abspath(shoal.__file__))
    out.append((pkg, f"{SHOAL}/shoal"))
    sites = [d for d in site.getsitepackages() if os.path.isdir(d)
             and not os.path.realpath(d).startswith(base + "/")]
    # package directories on PYTHONPATH too (an interpreter run with another one's packages)
    for d in sys.path:
        if os.path.basename(d) in ("site-packages", "dist-packages") and os.path.isdir(d) \
                and not os.path.realpath(d).startswith(base + "/") \
                and all(os.path.realpath(d) != os.path.realpath(e) for e in sites):
            sites.append(d)
    for i, d in enumerate(sites):
        out.append((d, f"{SHOAL}/site{i}"))
    return out


def _pythonpath(binds: list[tuple[str, str]]) -> str:
    return ":".join([SHOAL] + [dst for _, dst in binds if dst.startswith(f"{SHOAL}/site")])


def _bwrap_args(h: Host, job_dir: Path, data_dir: Path, limits: Limits, script: Path | None,
                fds: list[int], info_fd: int | None = None, chdir: str = WORK,
                python: bool = True, state: bool = False) -> list[str]:
    """bubblewrap's arguments for a job's sandbox (``python``: bind the interpreter and shoal,
    which the job's runner needs; a single command of a ``--connect`` job does not;
    ``state``: bind ``job_dir/state`` at /job/state, a resumable runner's)."""
    a = [h.bwrap or "bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net",
         "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox",
         "--die-with-parent", "--new-session", "--clearenv"]
    if h.rootless:  # not root: a user namespace of its own; none nested inside (bwrap >= 0.8;
        # seccomp refuses unshare and clone(CLONE_NEWUSER) anyway)
        a[1:1] = ["--unshare-user"] + (["--disable-userns"] if h.disable_userns else [])
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        src = "/" + top
        if os.path.islink(src):
            a += ["--symlink", os.readlink(src), src]
        elif os.path.isdir(src):
            a += ["--ro-bind", src, src]
    made: set[str] = set()

    def parents(dest: str) -> list[str]:
        """``--dir`` with mode 0755 for each missing parent of ``dest`` (bwrap would make them
        with the service's umask, maybe unreadable for the job user)."""
        out: list[str] = []
        d = os.path.dirname(dest)
        chain = []
        while d not in ("/", "") and d not in made:
            chain.append(d)
            d = os.path.dirname(d)
        for d in reversed(chain):
            made.add(d)
            out += ["--perms", "0755", "--dir", d]
        return out

    a += parents("/etc/x")
    for name in _ETC:
        a += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    passwd = (f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
              f"{h.user}:x:{h.uid}:{h.gid}:job:{WORK}:/usr/sbin/nologin\n")
    group = f"root:x:0:\n{h.user}:x:{h.gid}:\n"
    hosts = "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n"
    for path, text in (("/etc/passwd", passwd), ("/etc/group", group), ("/etc/hosts", hosts)):
        fd = _memfd("etc", text.encode())
        fds.append(fd)
        a += ["--ro-bind-data", str(fd), path]
    shm = max(64 << 20, min(limits.memory_bytes // 2, limits.output_bytes))
    a += ["--proc", "/proc", "--dev", "/dev",
          "--perms", "1777", "--size", str(shm), "--tmpfs", "/tmp",
          "--perms", "1777", "--size", str(shm), "--tmpfs", "/dev/shm"]
    binds = _python_binds() if python else []
    for src, dst in binds:
        a += parents(dst) + ["--ro-bind", src, dst]
    a += ["--ro-bind", str(data_dir), DATA,
          "--bind", str(job_dir / "work"), WORK]
    if script is not None:
        a += parents(SCRIPT) + ["--ro-bind", str(script), SCRIPT]
    if state:
        a += parents(STATE) + ["--bind", str(job_dir / "state"), STATE]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORK, "TMPDIR": "/tmp",
           "LANG": "C.UTF-8", "USER": h.user, "LOGNAME": h.user,
           # no user site (HOME is the job's tree), no cwd on sys.path: files the job writes
           # never become modules of the runtime's later processes
           "PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "SHOAL_SANDBOX": "1"}
    if python:
        env["PYTHONPATH"] = _pythonpath(binds)
    for k, v in env.items():
        a += ["--setenv", k, v]
    a += ["--chdir", chdir]
    if info_fd is not None:
        a += ["--info-fd", str(info_fd)]
    if h.seccomp:
        fd = _memfd("seccomp", h.seccomp)
        fds.append(fd)
        a += ["--seccomp", str(fd)]
    if h.rootless:
        # bwrap leaves no capabilities (bounding set empty) and sets no_new_privs; the
        # process limit is set inside, where it counts this job's processes only (the user
        # namespace's own count), not all of the service user's
        return a + ["--", h.prlimit or "prlimit", f"--nproc={limits.nprocs}", "--"]
    # bwrap runs as root (it may bind anything and needs no user namespace); setpriv then
    # drops to the job user with no capabilities, none to regain (bounding set empty)
    a += ["--", h.setpriv or "setpriv", f"--reuid={h.uid}", f"--regid={h.gid}",
          "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    return a


def _usage(root: Path) -> int:
    """Bytes under ``root`` as the output limit counts them (no symbolic link followed)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(root)]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                total += max(ENTRY_MIN, st.st_size, st.st_blocks * 512)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(e.path)
    return total


class _LogPump(threading.Thread):
    """Copies the job's output pipe to the log, counting bytes; stops writing at ``cap``."""

    def __init__(self, fd: int, log: Path, cap: int) -> None:
        super().__init__(daemon=True, name="sandbox-log")
        self.fd, self.log, self.cap = fd, log, cap
        self.written = 0
        self.over = False

    def run(self) -> None:
        with open(self.log, "ab") as out:
            while True:
                try:
                    chunk = os.read(self.fd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                if self.written + len(chunk) > self.cap:
                    chunk = chunk[: max(0, self.cap - self.written)]
                    self.over = True
                if chunk:
                    out.write(chunk)
                    out.flush()
                    self.written += len(chunk)
        os.close(self.fd)


def _note(log: Path, text: str) -> None:
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"shoal-sandbox: {text}\n")


def _overlap(job_dir: Path, data_dir: Path, log: Path) -> str | None:
    """Why these paths would let a job see or forge what it must not (None: they are fine)."""
    if data_dir == Path("/") or job_dir == data_dir or job_dir.is_relative_to(data_dir):
        return (f"the job directory {str(job_dir)!r} is inside the data directory "
                f"{str(data_dir)!r}: every job would see the others")
    if data_dir.is_relative_to(job_dir / "work"):
        return f"the data directory {str(data_dir)!r} is inside the job's work directory"
    if log.is_relative_to(job_dir / "work"):
        return f"the log {str(log)!r} is inside the job's work directory (the job could write it)"
    return None


def _validate(limits: Limits) -> None:
    for name in ("cpu_s", "memory_bytes", "nprocs", "wall_s", "output_bytes", "workers"):
        v = getattr(limits, name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise ValueError(f"Limits.{name} must be a positive number, got {v!r}")


def _run(argv: Callable[[int], list[str]], *, job_dir: Path, data_dir: Path, limits: Limits,
         log: Path, cancel: threading.Event | None, script: Path | None,
         companion: Companion | None = None, resumable: bool = False) -> JobResult:
    _validate(limits)
    h = host()
    problems = h.problems()
    if problems:
        return JobResult(125, "sandbox unavailable: " + "; ".join(problems))
    job_dir, data_dir = Path(job_dir).resolve(), Path(data_dir).resolve()
    if not data_dir.is_dir():
        return JobResult(125, f"sandbox: data directory {str(data_dir)!r} does not exist")
    work = job_dir / "work"
    bad = _overlap(job_dir, data_dir, Path(log).resolve())
    if bad:
        return JobResult(125, f"sandbox: {bad}")
    _prepare_work(work, h)
    if resumable:  # the job user's, outside work (not counted as output, not in archives)
        (job_dir / "state").mkdir(mode=0o700, exist_ok=True)
        _prepare_work(job_dir / "state", h)
    log.parent.mkdir(parents=True, exist_ok=True)
    fds: list[int] = list(companion.child_fds) if companion is not None else []
    cg: JobCgroups | None = None
    try:
        try:
            cg = JobCgroups(h, limits.memory_bytes, limits.nprocs)
        except OSError:
            # the machine may have changed under us (our own group moved or removed):
            # look again once
            h = reprobe()
            try:
                cg = JobCgroups(h, limits.memory_bytes, limits.nprocs)
            except OSError as exc:
                _note(log, f"no control groups for this job ({exc}); rlimits only")
                cg = None
        # bwrap writes the host pid of its namespace's first process here
        info_r, info_w = os.pipe()
        fds.append(info_w)
        try:
            bw = _bwrap_args(h, job_dir, data_dir, limits, script, fds, info_w,
                             state=resumable)
        except SandboxError as exc:
            os.close(info_r)
            return JobResult(125, f"sandbox: {exc}")
        # the runner inside writes one JSON line here: how it ended (refused, exit status)
        status_r, status_w = os.pipe()
        fds.append(status_w)
        return _supervise(h, cg, bw + argv(status_w), fds, status_r, info_r, job_dir, limits,
                          log, cancel, script is not None, companion, resumable)
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        if cg is not None and not cg.remove():
            _note(log, "warning: a control group of this job could not be removed")


def _rlimits(h: Host, cg: JobCgroups | None, limits: Limits) -> list[str]:
    cpu_tree = cg is not None and cg.cpu_seconds() is not None
    # per process; with accounting of the whole tree the monitor stops the job first
    cpu = max(1, round(limits.cpu_s)) + (5 if cpu_tree else 0)
    # SIGXCPU at the soft limit (the reason can be told from it), SIGKILL 2 s later
    out = [h.prlimit or "prlimit", f"--cpu={cpu}:{cpu + 2}", f"--fsize={limits.output_bytes}",
           "--core=0"]
    if (cg is None or not (cg.v1.get("pids") or (cg.v2 and "pids" in h.v2_controllers))) \
            and not h.rootless:  # rootless: inside the sandbox (see _bwrap_args)
        out.append(f"--nproc={limits.nprocs}")
    if cg is None or not (cg.v1.get("memory") or (cg.v2 and "memory" in h.v2_controllers)):
        out.append(f"--as={limits.memory_bytes}")
    return out + ["--"]


# The job's first process, started under ``setpriv --pdeathsig KILL`` (which stays through the
# exec of prlimit and bwrap): if the service died before that was set, its parent is no longer
# the service, and it stops; else it joins the job's groups and becomes bwrap. bwrap sets the
# same for itself only after its clone, too late for a service killed while a job starts.
_JOIN = ('[ "$PPID" = "$1" ] || exit 125; shift; '
         'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"')


def _supervise(h: Host, cg: JobCgroups | None, cmd: list[str], fds: list[int], status_r: int,
               info_r: int, job_dir: Path, limits: Limits, log: Path,
               cancel: threading.Event | None, script_job: bool,
               companion: Companion | None = None, resumable: bool = False) -> JobResult:
    work = job_dir / "work"
    join = [h.setpriv or "setpriv", "--pdeathsig", "KILL", "--", "/bin/sh", "-c", _JOIN, "sh",
            str(os.getpid()), *(cg.procs_files() if cg else []), "--"]
    full = join + _rlimits(h, cg, limits) + cmd
    _note(log, f"start: {describe()}")
    out_r, out_w = os.pipe()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                pass_fds=tuple(fds), start_new_session=True,
                                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
    except OSError as exc:
        os.close(out_r)
        os.close(out_w)
        os.close(status_r)
        os.close(info_r)
        if companion is not None:
            companion.finish()
        return JobResult(125, f"sandbox: cannot start: {exc}")
    os.close(out_w)
    for fd in fds:  # the child holds them now (the status pipe's end must close here)
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()
    init = _read_info(info_r)  # at once: bwrap writes it right after its clone
    pump = _LogPump(out_r, log, limits.output_bytes)
    pump.start()
    reason: str | None = None
    next_du, du_every = 0.0, 0.2
    while True:
        try:
            proc.wait(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if cancel is not None and cancel.is_set():
            reason = "cancelled"
        elif now - t0 > limits.wall_s:
            reason = f"wall time limit {_secs(limits.wall_s)} reached"
        elif cg is not None and (cpu := cg.cpu_seconds()) is not None and cpu > limits.cpu_s:
            reason = f"CPU time limit {_secs(limits.cpu_s)} exceeded"
        elif cg is not None and cg.oom_kills():
            reason = f"memory limit {_size(limits.memory_bytes)} exceeded"
        elif cg is not None and cg.pids_max_hits():
            reason = f"process limit {limits.nprocs} reached"
        elif pump.over:
            reason = f"output limit {_size(limits.output_bytes)} exceeded (log)"
        elif companion is not None and (far := companion.reason()) is not None:
            reason = far
        elif now >= next_du:
            t = time.monotonic()
            used = _usage(work) + pump.written
            # a walk of a big tree costs: look less often, never less than 5 times a second
            du_every = max(0.2, 5 * (time.monotonic() - t))
            next_du = time.monotonic() + du_every
            if used >= limits.output_bytes:
                reason = f"output limit {_size(limits.output_bytes)} exceeded"
        if reason is not None:
            _kill(proc, cg)
            break
    rc = proc.wait()
    _reap(cg, init)
    if companion is not None:  # what ran elsewhere for the job stops too
        companion.finish()
    pump.join(timeout=5)
    st = _read_status(status_r)
    if reason is None and companion is not None:
        reason = companion.reason()
    if reason is None:
        # after the end: what the kernel enforced on its own
        if cg is not None and cg.oom_kills():
            reason = f"memory limit {_size(limits.memory_bytes)} exceeded"
        elif cg is not None and cg.pids_max_hits():
            reason = f"process limit {limits.nprocs} reached"
        elif _usage(work) + pump.written >= limits.output_bytes or pump.over:
            reason = f"output limit {_size(limits.output_bytes)} exceeded"
        elif rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
            reason = f"CPU time limit {_secs(limits.cpu_s)} exceeded"
        elif "refused" in st:
            reason = f"refused: {st['refused']}"
        elif script_job and "exit" not in st:
            reason = (f"sandbox: the job runner ended without a result (exit status "
                      f"{128 - rc if rc < 0 else rc}); see the log")
    if reason is None:
        code = int(st.get("exit", 128 - rc if rc < 0 else rc))
    elif reason.startswith("refused: "):
        code = 2
    elif reason.startswith("sandbox: "):
        code = 125
    else:  # stopped: a limit or cancel (the runner could not remove its scratch tree)
        code = 137
        if not resumable:  # else the caller decides: resumed later, or removed (JobManager)
            _cleanup_scratch(work)
    _note(log, f"end: exit status {code}" + (f"; {reason}" if reason else "")
          + f" ({time.monotonic() - t0:.1f} s)")
    return JobResult(code, reason)


def _kill(proc: subprocess.Popen, cg: JobCgroups | None) -> None:
    """Kill the job's whole tree: its groups, and bwrap (the PID namespace goes with it)."""
    if cg is not None:
        cg.kill()
    try:
        proc.kill()
    except OSError:
        pass


def _gone(pid: int) -> bool:
    """True when ``pid`` has exited (gone, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _reap(cg: JobCgroups | None, init: int | None, timeout: float = 5.0) -> None:
    """Wait until every process of the job is gone: its groups empty, and the first process
    of its PID namespace exited (the kernel kills the others before that exit completes;
    bwrap itself may end first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = cg is not None and bool(cg.pids())
        if not left and (init is None or _gone(init)):
            return
        if cg is not None:
            cg.kill()
        if init is not None:
            try:
                os.kill(init, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def _read_info(fd: int) -> int | None:
    """The host pid of the sandbox's first process, from bwrap's ``--info-fd``."""
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _read_status(fd: int) -> dict:
    chunks = []
    try:
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                break
            chunks.append(b)
    except OSError:
        pass
    finally:
        os.close(fd)
    for line in b"".join(chunks).decode(errors="replace").splitlines()[::-1]:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return {}


def _cleanup_scratch(work: Path) -> None:
    """A stopped runner could not remove its scratch tree (``.shoal-scratch-*``)."""
    import shutil

    try:
        for e in os.scandir(work):
            if e.name.startswith(".shoal-scratch-") and e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
    except OSError:
        pass
