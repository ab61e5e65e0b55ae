"""What this machine lets the job sandbox use, and the per-job control groups.

:func:`host` probes once per process: bubblewrap and the helper programs, whether we run as
root, the job user, which cgroup hierarchies we may create groups in (v2 for killing a whole
tree, CPU accounting and the process list; memory and pids limits from v2 when its controllers
can be enabled, else from v1 hierarchies, else from rlimits), and the seccomp filter.
:class:`JobCgroups` is one job's groups: created before the job starts, joined by the job's
first process, read while it runs, killed and removed at the end.
"""

from __future__ import annotations

import itertools
import os
import pwd
import secrets
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field

from .sandbox_seccomp import program as seccomp_program

JOB_USER = "shoal-job"
PARENT = "shoal-sandbox"   # our directory in each cgroup hierarchy; one group per job below it
_counter = itertools.count()


@dataclass
class Host:
    """Facts about this machine, as the sandbox uses them (``docs/sandbox.md``)."""

    bwrap: str | None
    setpriv: str | None
    prlimit: str | None
    root: bool
    uid: int                     # the job user: ``shoal-job``, else nobody
    gid: int
    user: str
    v2: str | None = None        # parent of job groups in cgroup v2 (kill, cpu.stat, procs)
    v2_controllers: set[str] = field(default_factory=set)  # memory/pids enabled there
    v1: dict[str, str] = field(default_factory=dict)       # controller -> parent directory
    seccomp: bytes | None = None
    notes: list[str] = field(default_factory=list)
    # not root: jobs run as our own uid in a user namespace of their own (bwrap
    # --unshare-user), with rlimits only (docs/serve.md, "Running as a user")
    rootless: bool = False
    disable_userns: bool = False  # bwrap has --disable-userns (0.8 and later)

    def problems(self) -> list[str]:
        """What prevents running any job here (empty: jobs can run)."""
        out = []
        for name, path in (("bwrap", self.bwrap), ("prlimit", self.prlimit)):
            if path is None:
                out.append(f"{name} not found (Debian: apt-get install "
                           f"{'bubblewrap' if name == 'bwrap' else 'util-linux'})")
        if self.setpriv is None:
            out.append("setpriv not found (Debian: apt-get install util-linux)")
        if not self.root:
            why = _userns_unavailable()
            if why:
                out.append(f"the sandbox needs root, or unprivileged user namespaces ({why})")
        return out

    @property
    def memory(self) -> str:
        """How memory is limited: ``cgroup v2``, ``cgroup v1`` or ``rlimit``."""
        if "memory" in self.v2_controllers:
            return "cgroup v2"
        return "cgroup v1" if "memory" in self.v1 else "rlimit"

    @property
    def pids(self) -> str:
        """How the process count is limited."""
        if "pids" in self.v2_controllers:
            return "cgroup v2"
        return "cgroup v1" if "pids" in self.v1 else "rlimit"

    @property
    def cpu(self) -> str:
        """How CPU time is measured: the job's whole tree (cgroup) or per process (rlimit)."""
        if self.v2:
            return "cgroup v2"
        return "cgroup v1" if "cpuacct" in self.v1 else "rlimit"

    def describe(self) -> str:
        """One line: which mechanism does what (for logs and ``docs/sandbox.md``)."""
        who = (f"job user: the service's own uid {self.uid} in a user namespace per job"
               if self.rootless else f"job user {self.user} ({self.uid})")
        return (f"bwrap {self.bwrap or 'missing'}; {who}; "
                f"memory: {self.memory}; processes: {self.pids}; CPU: {self.cpu}; "
                f"kill: {'cgroup.kill + ' if self.v2 else ''}pid namespace; "
                f"seccomp: {'on' if self.seccomp else 'off'}")


_host: Host | None = None
_lock = threading.Lock()


def host() -> Host:
    """Probe this machine once (thread-safe) and return the facts."""
    global _host
    with _lock:
        if _host is None:
            _host = _probe()
        return _host


def reprobe() -> Host:
    """Probe again (after a job could not make its control groups) and return the facts."""
    global _host
    with _lock:
        _host = _probe()
        return _host


def _probe(cgroups: bool = True) -> Host:
    """The facts; ``cgroups=False`` ignores control groups (rlimits only, as on a machine
    without writable ones: tests use it to check that fallback)."""
    root = os.geteuid() == 0
    try:
        pw = pwd.getpwnam(JOB_USER)
        uid, gid, user = pw.pw_uid, pw.pw_gid, JOB_USER
    except KeyError:
        uid, gid, user = 65534, 65534, "nobody"
    h = Host(bwrap=shutil.which("bwrap"), setpriv=shutil.which("setpriv"),
             prlimit=shutil.which("prlimit"), root=root, uid=uid, gid=gid, user=user,
             seccomp=seccomp_program())
    if not root:  # no other user to switch to: our own, in a user namespace per job
        h.rootless = True
        h.disable_userns = _bwrap_has(h.bwrap, "--disable-userns")
        h.uid, h.gid = os.getuid(), os.getgid()
        h.user = JOB_USER  # its name inside the sandbox
        h.notes.append("not root: each job runs as this user in its own user namespace; "
                       "limits are rlimits (no control groups)")
    elif user == "nobody":
        h.notes.append(f"no user {JOB_USER} (scripts/setup.sh makes it): jobs run as nobody")
    if h.seccomp is None:
        h.notes.append("no seccomp filter for this architecture")
    if cgroups and root:
        _probe_cgroups(h)
    if h.v2 is None and not h.v1:
        h.notes.append("no writable cgroup hierarchy: limits are per-process rlimits")
    return h


def _bwrap_has(bwrap: str | None, option: str) -> bool:
    """Whether this bubblewrap knows ``option`` (from its --help)."""
    if bwrap is None:
        return False
    import subprocess

    try:
        r = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in r.stdout + r.stderr


def _userns_unavailable() -> str | None:
    """Why this kernel refuses unprivileged user namespaces (None: it may allow them; the
    service's start-up check starts one sandbox to be sure)."""
    for path, bad in (("/proc/sys/kernel/unprivileged_userns_clone", "0"),
                      ("/proc/sys/user/max_user_namespaces", "0")):
        try:
            with open(path) as f:
                if f.read().strip() == bad:
                    return f"{path} is {bad}"
        except OSError:
            continue
    return None


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) -> our group's path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in ctrls.split(",") if ctrls else [""]:
                    out[c] = path
    except OSError:
        pass
    return out


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of the cgroup mounts."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                sep = parts.index("-")
                fstype = parts[sep + 1]
                if fstype in ("cgroup", "cgroup2"):
                    out.append((fstype, parts[3], parts[4], set(parts[sep + 3].split(","))))
    except (OSError, ValueError):
        pass
    return out


def _usable_parent(mount_root: str, mountpoint: str, own: str | None) -> str | None:
    """``MOUNT/OWN/shoal-sandbox`` if we may create (and remove) groups in it."""
    if own is None:
        return None
    if mount_root != "/" and own.startswith(mount_root):
        own = own[len(mount_root):] or "/"
    parent = os.path.join(mountpoint + own.rstrip("/"), PARENT)
    probe = os.path.join(parent, f"probe-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        os.makedirs(parent, exist_ok=True)
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError:
        return None
    _sweep(parent)
    return parent


def _sweep(parent: str) -> None:
    """Kill what is left in the job groups of a service that died, and remove the groups."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for n in names:
        if not n.startswith("job-") or _alive_owner(n):
            continue
        d = os.path.join(parent, n)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:  # busy: a job that outlived its service
                try:
                    with open(os.path.join(d, "cgroup.kill"), "w") as f:
                        f.write("1")
                except OSError:
                    pass
                for pid in JobCgroups._read(os.path.join(d, "cgroup.procs")).split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.02)
    try:
        os.rmdir(parent)  # when no job uses it (see JobCgroups.remove)
    except OSError:
        pass


def _alive_owner(name: str) -> bool:
    try:
        pid = int(name.split("-")[1])
    except (IndexError, ValueError):
        return False
    return pid != os.getpid() and os.path.exists(f"/proc/{pid}")


def _probe_cgroups(h: Host) -> None:
    own = _own_cgroups()
    for fstype, mroot, mpoint, opts in _mounts():
        if fstype == "cgroup2" and h.v2 is None:
            parent = _usable_parent(mroot, mpoint, own.get(""))
            if parent is None:
                continue
            h.v2 = parent
            # memory/pids from v2 need them enabled in our group (fails while it holds
            # processes, unless it is the root) and in our parent directory
            try:
                with open(os.path.join(mpoint, "cgroup.controllers")) as f:
                    avail = set(f.read().split()) & {"memory", "pids"}
            except OSError:
                avail = set()
            for c in sorted(avail):
                try:
                    for d in (os.path.dirname(parent), parent):
                        with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                            f.write(f"+{c}")
                    h.v2_controllers.add(c)
                except OSError:
                    pass
        elif fstype == "cgroup":
            for c in ("memory", "pids", "cpuacct"):
                if c in opts and c not in h.v1:
                    parent = _usable_parent(mroot, mpoint, own.get(c))
                    if parent is not None:
                        h.v1[c] = parent


def _mkdir_below(parent: str, d: str) -> None:
    """Make the job group ``d`` below our directory ``parent`` (made again if another job's
    end removed it in between)."""
    for _ in range(5):
        os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(d)
            return
        except FileNotFoundError:
            continue
    os.mkdir(d)


class JobCgroups:
    """One job's control groups (whichever of v2 and v1 this machine allows)."""

    def __init__(self, h: Host, memory_bytes: int, nprocs: int, tag: str = "") -> None:
        """``tag`` (letters and digits) ends the groups' names, so that
        :func:`kill_tagged` finds every group of one job on this node."""
        self.host = h
        if tag and not tag.isalnum():
            raise ValueError(f"cgroup tag {tag!r}: letters and digits only")
        self.name = (f"job-{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}"
                     + (f"-{tag}" if tag else ""))
        self.v2: str | None = None
        self.v1: dict[str, str] = {}
        try:
            if h.v2:
                self.v2 = os.path.join(h.v2, self.name)
                _mkdir_below(h.v2, self.v2)
                if "memory" in h.v2_controllers:
                    self._write(self.v2, "memory.max", memory_bytes)
                    self._write(self.v2, "memory.swap.max", 0, must=False)
                if "pids" in h.v2_controllers:
                    self._write(self.v2, "pids.max", nprocs)
            for c, parent in h.v1.items():
                if c == "memory" and "memory" in h.v2_controllers:
                    continue
                if c == "pids" and "pids" in h.v2_controllers:
                    continue
                if c == "cpuacct" and self.v2:
                    continue
                d = os.path.join(parent, self.name)
                _mkdir_below(parent, d)
                self.v1[c] = d
                if c == "memory":
                    self._write(d, "memory.limit_in_bytes", memory_bytes)
                    self._write(d, "memory.memsw.limit_in_bytes", memory_bytes, must=False)
                elif c == "pids":
                    self._write(d, "pids.max", nprocs)
        except OSError:
            self.remove()
            raise

    @staticmethod
    def _write(d: str, name: str, value: int, must: bool = True) -> None:
        try:
            with open(os.path.join(d, name), "w") as f:
                f.write(str(value))
        except OSError:
            if must:
                raise

    @staticmethod
    def _read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files the job's first process writes its pid into."""
        dirs = ([self.v2] if self.v2 else []) + list(self.v1.values())
        return [os.path.join(d, "cgroup.procs") for d in dirs]

    def cpu_seconds(self) -> float | None:
        """CPU time of the whole job (every process, living or ended), or None."""
        if self.v2:
            for line in self._read(os.path.join(self.v2, "cpu.stat")).splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        if "cpuacct" in self.v1:
            text = self._read(os.path.join(self.v1["cpuacct"], "cpuacct.usage")).strip()
            if text:
                return int(text) / 1e9
        return None

    def _counter(self, ctrl: str, v2file: str, v1file: str, key: str) -> int:
        if ctrl in self.host.v2_controllers and self.v2:
            text = self._read(os.path.join(self.v2, v2file))
        elif ctrl in self.v1:
            text = self._read(os.path.join(self.v1[ctrl], v1file))
        else:
            return 0
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1])
        return 0

    def oom_kills(self) -> int:
        """Processes the kernel killed for the memory limit."""
        return self._counter("memory", "memory.events", "memory.oom_control", "oom_kill")

    def pids_max_hits(self) -> int:
        """Forks refused by the process limit."""
        return self._counter("pids", "pids.events", "pids.events", "max")

    def pids(self) -> set[int]:
        """Processes still in any of the job's groups."""
        out: set[int] = set()
        for p in self.procs_files():
            out.update(int(x) for x in self._read(p).split())
        return out

    def kill(self) -> None:
        """SIGKILL every process of the job (cgroup.kill where there is one)."""
        if self.v2:
            try:
                with open(os.path.join(self.v2, "cgroup.kill"), "w") as f:
                    f.write("1")
            except OSError:
                pass
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def remove(self, timeout: float = 5.0) -> bool:
        """Kill what is left, remove the groups; False if some process would not go."""
        deadline = time.monotonic() + timeout
        while self.pids() and time.monotonic() < deadline:
            self.kill()
            time.sleep(0.02)
        ok = True
        for d in ([self.v2] if self.v2 else []) + list(self.v1.values()):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                ok = False
            # our directory goes too when no other job uses it: left empty below a group
            # we do not own (the memory group of our process), it would keep that from
            # being removed; the next job makes it again
            try:
                os.rmdir(os.path.dirname(d))
            except OSError:
                pass
        return ok


def kill_tagged(h: Host, tag: str, timeout: float = 5.0) -> int:
    """Kill every process in this node's job groups whose name ends with ``-TAG`` (the
    commands of one job, ``shoal serve --connect``), and remove the groups whose owner is
    gone. Returns how many processes were found in them."""
    if not tag or not tag.isalnum():
        raise ValueError(f"cgroup tag {tag!r}: letters and digits only")
    groups = []
    for parent in ([h.v2] if h.v2 else []) + list(h.v1.values()):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        groups += [os.path.join(parent, n) for n in names
                   if n.startswith("job-") and n.endswith(f"-{tag}")]
    found: set[int] = set()
    deadline = time.monotonic() + timeout
    while groups and time.monotonic() < deadline:
        left = []
        for d in groups:
            pids = {int(p) for p in JobCgroups._read(os.path.join(d, "cgroup.procs")).split()}
            found |= pids
            if pids:
                try:
                    with open(os.path.join(d, "cgroup.kill"), "w") as f:
                        f.write("1")
                except OSError:
                    pass
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                left.append(d)
            elif not _alive_owner(os.path.basename(d)):
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(d)
        groups = left
        if groups:
            time.sleep(0.02)
    return len(found)
