"""Allocation discovery: which nodes and resources this batch job was given.

*Where* agents run, apart from *how* they start (``shoal.launch`` launchers) and *who* asks
the batch system for nodes (pilot jobs): Parsl's provider/launcher split. ``discover()``
reads only the job's own variables and files (never ``os.cpu_count()``: a node's hardware
threads are not what the job was given); outside any allocation it returns None and the
local default stays as it is.

Sources, first match wins: an explicit ``--hostfile`` / ``--hosts``, then Slurm
(``SLURM_JOB_NODELIST``), PBS/Torque (``PBS_NODEFILE``), SGE (``PE_HOSTFILE``), LSF
(``LSB_DJOB_HOSTFILE`` / ``LSB_MCPU_HOSTS``) and Flux (``flux job info ID R``, RFC 20).
Every parser is a pure function of the variables and file text, so recorded environments
test it; anything unreadable raises AllocationError with one line naming the variable or
``file:line`` and what is wrong.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


class AllocationError(ValueError):
    """The allocation's description cannot be read; the message names what and where."""


@dataclass(frozen=True)
class Node:
    """One node of an allocation, as the site's launcher names it."""

    name: str                      # host name for launchers (srun --nodelist, mpirun -H, ssh)
    cpus: int                      # CPUs this job was given there; 0: not given (a hostfile
    #                                line "host" alone): the node's own core count, counted there
    gpus: tuple[str, ...] = ()     # GPU ids this job was given there ("0", "1", ...)


@dataclass(frozen=True)
class Allocation:
    """The nodes of one batch job (or hostfile) and what it may use on each."""

    kind: str                      # "slurm" | "pbs" | "sge" | "lsf" | "flux" | "hostfile" | "hosts"
    nodes: tuple[Node, ...]
    job_id: str | None = None
    end_time: float | None = None  # epoch seconds when the job's walltime ends, when known
    source: str = ""               # where it was read from, for `shoal info` and errors
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def cpus(self) -> int:
        """CPUs over all nodes (nodes whose count is counted there add 0)."""
        return sum(n.cpus for n in self.nodes)

    @property
    def gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    def describe(self) -> str:
        """One line: ``slurm job 42: 4 nodes (n[1-4]), 16 CPUs, 0 GPUs``."""
        job = f" job {self.job_id}" if self.job_id else ""
        names = ",".join(n.name for n in self.nodes[:8]) + (",..." if len(self.nodes) > 8 else "")
        return (f"{self.kind}{job}: {len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''} "
                f"({names}), {self.cpus} CPUs, {self.gpus} GPUs")


# the variables discover() looks at: without any of them (and no hostfile or hosts given)
# there is no allocation, which shoal.launch.runtime checks without importing this module
BATCH_VARS = ("SLURM_JOB_ID", "PBS_NODEFILE", "PE_HOSTFILE", "LSB_JOBID", "FLUX_JOB_ID",
              "FLUX_URI")


def discover(env: Mapping[str, str] | None = None, hostfile: str | os.PathLike[str] | None = None,
             hosts: str | None = None) -> Allocation | None:
    """The allocation this process runs in; None outside any (the local default then
    applies). An explicit ``hostfile`` (SCOOP style) or ``hosts`` string wins; then the
    batch systems' own variables: Slurm, PBS, SGE, LSF, Flux. Raises AllocationError when a
    description is there but cannot be read."""
    env = os.environ if env is None else env
    if hostfile is not None:
        return read_hostfile(hostfile)
    if hosts is not None:
        return parse_hosts(hosts)
    if env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST")):
        return slurm(env)
    if env.get("PBS_NODEFILE"):
        return pbs(env)
    if env.get("PE_HOSTFILE"):
        return sge(env)
    if env.get("LSB_JOBID") and (env.get("LSB_DJOB_HOSTFILE") or env.get("LSB_MCPU_HOSTS")
                                 or env.get("LSB_HOSTS")):
        return lsf(env)
    if env.get("FLUX_JOB_ID") or env.get("FLUX_URI"):
        return flux(env)
    return None


# ---- shared helpers -------------------------------------------------------------------
def _read(path: str, what: str) -> str:
    """A batch system's file, or AllocationError naming the variable that points at it."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        raise AllocationError(f"{what}={path}: cannot read it ({exc.strerror or exc})")


def _count_slots(names: Iterable[str]) -> list[tuple[str, int]]:
    """One name per slot -> (name, slots) in order of first appearance."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return list(counts.items())


def _one_per_line(text: str, what: str) -> list[str]:
    """The host names of a one-name-a-line file (blank lines skipped)."""
    names = []
    for i, ln in enumerate(text.splitlines(), 1):
        if len(ln.split()) > 1:
            raise AllocationError(f"{what}:{i}: {ln.strip()!r} is not one host name")
        if ln.strip():
            names.append(ln.strip())
    if not names:
        raise AllocationError(f"{what}: no host names in it")
    return names


def _gpu_ids(spec: str) -> tuple[str, ...]:
    ids = tuple(s.strip() for s in spec.split(",") if s.strip())
    return () if ids in (("NoDevFiles",), ("-1",)) else ids


def _int(value: str | None, what: str) -> int | None:
    if not value:
        return None
    m = re.match(r"^\d+", value.strip())
    if m is None:
        raise AllocationError(f"{what}={value!r}: not a number")
    return int(m.group(0))


# ---- Slurm ----------------------------------------------------------------------------
def slurm(env: Mapping[str, str]) -> Allocation:
    """Nodes from ``SLURM_JOB_NODELIST`` (python-hostlist, Slurm's own syntax), CPUs per node
    from ``SLURM_JOB_CPUS_PER_NODE`` (``4(x2),1``), GPUs from ``SLURM_JOB_GPUS`` /
    ``SLURM_STEP_GPUS`` / ``CUDA_VISIBLE_DEVICES`` (the same ids on every node, as Slurm
    gives them) or a count in ``SLURM_GPUS_ON_NODE``, walltime end from
    ``SLURM_JOB_END_TIME``."""
    import hostlist  # python-hostlist: Slurm's hostlist syntax, ranges, padding, nesting

    spec = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    try:
        names = hostlist.expand_hostlist(spec)
    except hostlist.BadHostlist as exc:
        raise AllocationError(f"SLURM_JOB_NODELIST={spec!r}: not a Slurm host list ({exc})")
    if not names:
        raise AllocationError("SLURM_JOB_NODELIST is empty")
    cpus_spec = env.get("SLURM_JOB_CPUS_PER_NODE", "")
    cpus = expand_counts(cpus_spec, "SLURM_JOB_CPUS_PER_NODE") if cpus_spec else []
    if cpus and len(cpus) != len(names):
        raise AllocationError(f"SLURM_JOB_CPUS_PER_NODE={cpus_spec!r} names {len(cpus)} nodes, "
                              f"SLURM_JOB_NODELIST={spec!r} {len(names)}")
    if not cpus:  # an old Slurm or a stripped environment: the node's own share, else 1
        per = _int(env.get("SLURM_CPUS_ON_NODE"), "SLURM_CPUS_ON_NODE") or 1
        cpus = [per] * len(names)
    gpus = _gpu_ids(env.get("SLURM_JOB_GPUS") or env.get("SLURM_STEP_GPUS")
                    or env.get("CUDA_VISIBLE_DEVICES") or "")
    if not gpus and env.get("SLURM_GPUS_ON_NODE"):  # a count only: the job's devices 0..n-1
        gpus = tuple(str(i) for i in range(_int(env["SLURM_GPUS_ON_NODE"], "SLURM_GPUS_ON_NODE") or 0))
    end = env.get("SLURM_JOB_END_TIME")
    return Allocation(
        kind="slurm",
        nodes=tuple(Node(n, c, gpus) for n, c in zip(names, cpus, strict=True)),
        job_id=env.get("SLURM_JOB_ID"),
        end_time=(float(end) if end and end.isdigit() and int(end) > 0
                  else None if end else _squeue_end(env)),
        source="SLURM_JOB_NODELIST",
    )


def _squeue_end(env: Mapping[str, str]) -> float | None:
    """The job's end from ``squeue -o %e`` (local time), for shells that lack
    ``SLURM_JOB_END_TIME`` (salloc's, and every Slurm before 23.02); None: no limit, or no
    squeue on the environment's PATH (a recorded environment without PATH asks nothing)."""
    from datetime import datetime

    exe = shutil.which("squeue", path=env.get("PATH", ""))
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, "-h", "-j", env["SLURM_JOB_ID"], "-o", "%e"], capture_output=True,
                           text=True, timeout=10, env=dict(env))
        return datetime.strptime(r.stdout.strip(), "%Y-%m-%dT%H:%M:%S").timestamp()
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None  # NONE (no time limit), an unknown job, a Slurm that does not answer


_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_counts(spec: str, what: str) -> list[int]:
    """Slurm's compressed counts: ``4(x2),1`` -> ``[4, 4, 1]``."""
    out: list[int] = []
    for part in spec.split(","):
        m = _COUNT.match(part.strip())
        if m is None:
            raise AllocationError(f"{what}={spec!r}: cannot read {part!r} (expected N or N(xK))")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


# ---- PBS / Torque ---------------------------------------------------------------------
def pbs(env: Mapping[str, str]) -> Allocation:
    """``PBS_NODEFILE`` holds one line per CPU slot, a host repeated once per slot (PBS Pro
    and Torque alike): slots per node are the repeats. GPUs: Torque's ``PBS_GPUFILE``
    (``host-gpuN`` lines, per node), else ``CUDA_VISIBLE_DEVICES`` (PBS Pro's cgroup hook,
    the same ids on every node). The walltime end is ``PBS_WALLTIME`` (Torque, seconds or
    H:M:S) after the node file was written, which the MOM does as the job starts."""
    path = env["PBS_NODEFILE"]
    text = _read(path, "PBS_NODEFILE")
    names = _one_per_line(text, f"PBS_NODEFILE {path}")
    per_node: dict[str, tuple[str, ...]] = {}
    if env.get("PBS_GPUFILE"):
        per_node = _pbs_gpufile(env["PBS_GPUFILE"])
    common = _gpu_ids(env.get("CUDA_VISIBLE_DEVICES", ""))
    end = None
    if env.get("PBS_WALLTIME"):
        end = os.stat(path).st_mtime + _seconds(env["PBS_WALLTIME"], "PBS_WALLTIME")
    return Allocation(
        kind="pbs",
        nodes=tuple(Node(n, c, per_node.get(n, common if not per_node else ()))
                    for n, c in _count_slots(names)),
        job_id=env.get("PBS_JOBID"), end_time=end, source=f"PBS_NODEFILE={path}")


def _pbs_gpufile(path: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for i, ln in enumerate(_read(path, "PBS_GPUFILE").splitlines(), 1):
        if not ln.strip():
            continue
        host, sep, gpu = ln.strip().rpartition("-gpu")
        if not sep or not host or not gpu.isdigit():
            raise AllocationError(f"PBS_GPUFILE {path}:{i}: {ln.strip()!r} is not HOST-gpuN")
        out.setdefault(host, []).append(gpu)
    return {h: tuple(g) for h, g in out.items()}


def _seconds(text: str, what: str) -> float:
    """Seconds from ``S`` or ``[[D-]H:]M:S``."""
    m = re.match(r"^(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+)$", text.strip())
    if m is None:
        raise AllocationError(f"{what}={text!r}: expected seconds or H:M:S")
    days, a, b, s = m.groups()
    hours, mins = (0, int(a)) if b is None and a is not None else (int(a or 0), int(b or 0))
    return int(days or 0) * 86400 + hours * 3600 + mins * 60 + int(s)


# ---- SGE ------------------------------------------------------------------------------
def sge(env: Mapping[str, str]) -> Allocation:
    """``PE_HOSTFILE`` lines ``host slots queue processors`` (a host may come once per
    queue: its slots add up); job id ``JOB_ID``. SGE says nothing of GPUs or the end."""
    path = env["PE_HOSTFILE"]
    slots: dict[str, int] = {}
    for i, ln in enumerate(_read(path, "PE_HOSTFILE").splitlines(), 1):
        fields = ln.split()
        if not fields:
            continue
        if len(fields) < 2 or not fields[1].isdigit() or int(fields[1]) < 1:
            raise AllocationError(f"PE_HOSTFILE {path}:{i}: {ln.strip()!r} is not "
                                  "'host slots queue processors' with slots >= 1")
        slots[fields[0]] = slots.get(fields[0], 0) + int(fields[1])
    if not slots:
        raise AllocationError(f"PE_HOSTFILE {path}: no hosts in it")
    return Allocation(kind="sge", nodes=tuple(Node(h, c) for h, c in slots.items()),
                      job_id=env.get("JOB_ID"), source=f"PE_HOSTFILE={path}")


# ---- LSF ------------------------------------------------------------------------------
def lsf(env: Mapping[str, str]) -> Allocation:
    """``LSB_DJOB_HOSTFILE`` (one line per slot), else ``LSB_MCPU_HOSTS`` (``h1 4 h2 4``),
    else ``LSB_HOSTS`` (one name per slot); job id ``LSB_JOBID``; GPUs from
    ``CUDA_VISIBLE_DEVICES`` (the same ids on every node)."""
    gpus = _gpu_ids(env.get("CUDA_VISIBLE_DEVICES", ""))
    if env.get("LSB_DJOB_HOSTFILE"):
        path = env["LSB_DJOB_HOSTFILE"]
        names = _one_per_line(_read(path, "LSB_DJOB_HOSTFILE"), f"LSB_DJOB_HOSTFILE {path}")
        pairs, source = _count_slots(names), f"LSB_DJOB_HOSTFILE={path}"
    elif env.get("LSB_MCPU_HOSTS"):
        spec = env["LSB_MCPU_HOSTS"]
        words = spec.split()
        if len(words) % 2 or not all(w.isdigit() and int(w) > 0 for w in words[1::2]):
            raise AllocationError(f"LSB_MCPU_HOSTS={spec!r}: expected 'host slots' pairs "
                                  "(e.g. 'h1 4 h2 4')")
        merged: dict[str, int] = {}
        for h, c in zip(words[::2], words[1::2], strict=True):
            merged[h] = merged.get(h, 0) + int(c)
        pairs, source = list(merged.items()), "LSB_MCPU_HOSTS"
    else:
        pairs, source = _count_slots(env["LSB_HOSTS"].split()), "LSB_HOSTS"
        if not pairs:
            raise AllocationError("LSB_HOSTS is empty")
    return Allocation(kind="lsf", nodes=tuple(Node(h, c, gpus) for h, c in pairs),
                      job_id=env.get("LSB_JOBID"), source=source)


# ---- Flux -----------------------------------------------------------------------------
def flux(env: Mapping[str, str]) -> Allocation:
    """The job's resource set R (RFC 20) from the flux command: ``flux job info ID R`` for
    ``FLUX_JOB_ID``, else (or when that fails: inside ``flux alloc`` the id is the enclosing
    instance's) ``flux resource R`` of the instance at ``FLUX_URI``, which is the job's own."""
    exe = shutil.which("flux", path=env.get("PATH", ""))
    what = "FLUX_JOB_ID" if env.get("FLUX_JOB_ID") else "FLUX_URI"
    if exe is None:
        raise AllocationError(f"{what} is set but the flux command is not on PATH: Flux "
                              "resources are read with `flux resource R` (load the flux module, "
                              "or give --hostfile)")
    tries = ([[exe, "job", "info", env["FLUX_JOB_ID"], "R"]] if env.get("FLUX_JOB_ID") else [])
    tries.append([exe, "resource", "R"])
    errors = []
    for cmd in tries:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=dict(env))
        except (OSError, subprocess.TimeoutExpired) as exc:
            errors.append(f"`{' '.join(cmd[1:])}`: {exc}")
            continue
        if r.returncode == 0 and r.stdout.strip():
            return flux_resources(r.stdout, f"`flux {' '.join(cmd[1:])}`", env.get("FLUX_JOB_ID"))
        errors.append(f"`flux {' '.join(cmd[1:])}`: {(r.stderr.strip() or 'no output').splitlines()[-1]}")
    raise AllocationError(f"{what} is set but Flux gave no resource set: " + "; ".join(errors))


def flux_resources(text: str, source: str, job_id: str | None = None) -> Allocation:
    """An Allocation from an RFC 20 resource set (R version 1): ``execution.R_lite`` entries
    give cores and GPUs per broker rank, ``execution.nodelist`` (RFC 29 host lists) names
    the ranks in order, ``execution.expiration`` is the end (0: none)."""
    import hostlist

    try:
        doc = json.loads(text)
        ex = doc["execution"]
        entries = ex["R_lite"]
        names = hostlist.expand_hostlist(",".join(ex.get("nodelist") or []))
    except (ValueError, KeyError, TypeError, hostlist.BadHostlist) as exc:
        raise AllocationError(f"{source}: not an RFC 20 resource set ({type(exc).__name__}: {exc})")
    per_rank: dict[int, tuple[int, tuple[str, ...]]] = {}
    for entry in entries:
        try:
            ranks = idset(entry["rank"])
            kids = entry.get("children", {})
            cores = len(idset(kids.get("core", "")))
            gpus = tuple(str(g) for g in sorted(idset(kids.get("gpu", ""))))
        except (KeyError, AttributeError, ValueError) as exc:
            raise AllocationError(f"{source}: bad R_lite entry {entry!r} ({exc})")
        for r in ranks:
            per_rank[r] = (cores, gpus)
    ranks = sorted(per_rank)
    if names and len(names) != len(ranks):
        raise AllocationError(f"{source}: nodelist names {len(names)} hosts, R_lite {len(ranks)} ranks")
    if not ranks:
        raise AllocationError(f"{source}: no ranks in R_lite")
    nodes = tuple(Node(names[i] if names else f"rank{r}", *per_rank[r]) for i, r in enumerate(ranks))
    exp = ex.get("expiration") or 0
    return Allocation(kind="flux", nodes=nodes, job_id=job_id,
                      end_time=float(exp) if exp and float(exp) > 0 else None, source=source)


def idset(spec: str) -> list[int]:
    """An RFC 22 id set (``0-3,7``, optionally in brackets) -> ``[0, 1, 2, 3, 7]``."""
    spec = spec.strip()
    if spec.startswith("[") and spec.endswith("]"):
        spec = spec[1:-1]
    out: list[int] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"not an id set: {spec!r}")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# ---- hostfile and --hosts -------------------------------------------------------------
_HOST = re.compile(r"^[A-Za-z0-9_.\[\]\-,]+$")


def read_hostfile(path: str | os.PathLike[str]) -> Allocation:
    """A SCOOP-style hostfile: one host a line, ``host N``, ``host workers=N`` (SCOOP's
    documented form), ``host slots=N`` (OpenMPI's), ``host:N`` (MPICH's), or ``host`` alone,
    which gives the node's own core count, counted there (SCOOP's rule; ``Node.cpus`` 0). Slurm-style
    ranges (``n[1-4] 8``) expand; ``#`` starts a comment; a host named twice adds up.
    Anything else is an AllocationError naming ``file:line``."""
    import hostlist

    path = os.fspath(path)
    text = _read(path, "--hostfile")
    entries: list[tuple[str, int, str]] = []
    for i, raw in enumerate(text.splitlines(), 1):
        ln = raw.split("#", 1)[0].strip()
        if not ln:
            continue
        where = f"{path}:{i}"
        fields = ln.split()
        m = re.match(r"^([^:\s]+):(\d+)$", ln)  # MPICH machinefile form, host:N
        if m:
            fields = [m.group(1), m.group(2)]
        if len(fields) > 2:
            raise AllocationError(f"{where}: {raw.strip()!r}: expected 'host' or 'host N'")
        count = 0
        if len(fields) == 2:
            word = fields[1].split("=", 1)
            if len(word) == 2 and word[0] not in ("workers", "slots", "cpus"):
                raise AllocationError(f"{where}: {raw.strip()!r}: unknown key {word[0]!r} "
                                      "(expected N, workers=N or slots=N)")
            n = word[-1]
            if not n.isdigit() or int(n) < 1:
                raise AllocationError(f"{where}: {raw.strip()!r}: the count {n!r} is not a "
                                      "whole number >= 1")
            count = int(n)
        if not _HOST.match(fields[0]):
            raise AllocationError(f"{where}: {raw.strip()!r}: {fields[0]!r} is not a host name")
        try:
            names = hostlist.expand_hostlist(fields[0])
        except hostlist.BadHostlist as exc:
            raise AllocationError(f"{where}: {raw.strip()!r}: bad host range ({exc})")
        entries.extend((n, count, where) for n in names)
    if not entries:
        raise AllocationError(f"{path}: no hosts in it")
    return Allocation(kind="hostfile", nodes=_merge(entries), source=f"--hostfile {path}")


def parse_hosts(spec: str) -> Allocation:
    """``--hosts``: ``h1:4,h2:4`` or ``h1 h2`` (commas or spaces), Slurm's ranges too
    (``n[1-4]:8``); a host without ``:N`` gets its own core count, counted there, as in a
    hostfile."""
    import hostlist

    entries: list[tuple[str, int, str]] = []
    for item in _hosts_items(spec):
        name, sep, n = item.rpartition(":") if ":" in item else (item, "", "")
        if sep and (not n.isdigit() or int(n) < 1):
            raise AllocationError(f"--hosts {spec!r}: {item!r}: the count {n!r} is not a whole number >= 1")
        try:
            names = hostlist.expand_hostlist(name) if "[" in name else [name]
        except hostlist.BadHostlist as exc:
            raise AllocationError(f"--hosts {spec!r}: {item!r}: bad host range ({exc})") from None
        for one in names:
            if not one or not _HOST.match(one):
                raise AllocationError(f"--hosts {spec!r}: {item!r} is not HOST or HOST:N")
            entries.append((one, int(n) if sep else 0, "--hosts"))
    if not entries:
        raise AllocationError("--hosts is empty")
    return Allocation(kind="hosts", nodes=_merge(entries), source=f"--hosts {spec}")


def _hosts_items(spec: str) -> list[str]:
    """The items of a --hosts value, split at commas and spaces outside brackets."""
    items, cur, depth = [], "", 0
    for ch in spec:
        depth += (ch == "[") - (ch == "]")
        if ch in ", " and depth == 0:
            if cur:
                items.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        items.append(cur)
    return items


def _merge(entries: list[tuple[str, int, str]]) -> tuple[Node, ...]:
    counts: dict[str, int] = {}
    for name, n, where in entries:
        if name in counts and (n == 0 or counts[name] == 0):
            raise AllocationError(f"{where}: {name} is named twice and one of them has no count "
                                  "(give 'host N' on one line)")
        counts[name] = counts.get(name, 0) + n
    return tuple(Node(h, c) for h, c in counts.items())


# ---- this node ------------------------------------------------------------------------
def _short(name: str) -> str:
    """A host name without its domain; an address as it is."""
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        return name.split(".")[0]


def _local_names() -> set[str]:
    host = socket.gethostname()
    return {host, host.split(".")[0], socket.getfqdn(), "localhost", "127.0.0.1"}


def this_node(env: Mapping[str, str] | None = None, hostfile: str | os.PathLike[str] | None = None,
              hosts: str | None = None) -> Node | None:
    """What the allocation gave the node this process runs on (an agent's default slots
    and GPUs), or None outside any allocation (or on a host it does not name). Under Slurm
    the node is ``SLURMD_NODENAME``; elsewhere this host's name (short or full) matched
    against the allocation's nodes. A count left to the node (0) is this host's cores."""
    env = os.environ if env is None else env
    alloc = discover(env, hostfile=hostfile, hosts=hosts)
    if alloc is None:
        return None
    name = env.get("SLURMD_NODENAME") if alloc.kind == "slurm" else None
    if alloc.kind == "slurm" and name is None and env.get("SLURM_CPUS_ON_NODE"):
        cpus = _int(env.get("SLURM_CPUS_ON_NODE"), "SLURM_CPUS_ON_NODE") or 1
        return Node(socket.gethostname().split(".")[0], cpus, alloc.nodes[0].gpus)
    if name is None:
        mine = _local_names()
        short = {_short(n) for n in mine}
        name = next((n.name for n in alloc.nodes if n.name in mine or _short(n.name) in short), None)
    for node in alloc.nodes:
        if node.name == name:
            if node.cpus == 0:
                return Node(node.name, os.cpu_count() or 1, node.gpus)
            return node
    return None
