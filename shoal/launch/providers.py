"""Providers: who asks the batch system for nodes (pilot jobs for `shoal alloc`).

Parsl's provider split: *discovery* says what an allocation has, a *launcher* starts an
agent on a node, a *provider* submits, watches and cancels batch jobs. Each job runs a
script rendered from a template the user can read (``shoal alloc --print-script``) and
replace (``--template FILE``); the script starts one ``shoal agent`` per node.

Slurm (``sbatch --parsable``, ``squeue``, ``scancel``) and PBS (``qsub``, ``qstat -f``,
``qdel``) are called directly rather than through PSI/J (``psij-python``): PSI/J generates
its own job script (fixed mustache template, output sent to its own work directory), so a
user's script could not be shown or extended; it pins ``packaging<=25`` and
``psutil<=7.0``; and its status comes from a background thread polling ``squeue --me``
(every 30 s by default). It did work with Slurm 22.05 here (docs/alloc.md has the numbers).

The parsers are pure functions of the commands' text so they are tested on recorded output.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources

# Job states, as `shoal alloc` needs them: waiting in the queue, running, or ended.
PENDING = "pending"
RUNNING = "running"
ENDED = "ended"


class ProviderError(RuntimeError):
    """A batch-system command failed; the message holds the command and its error text."""


class TemplateError(ValueError):
    """A job-script template or option cannot be used; the message names what and where."""


@dataclass(frozen=True)
class JobStatus:
    """What the batch system says of one job."""

    state: str          # PENDING | RUNNING | ENDED
    native: str = ""    # the batch system's own state (COMPLETED, FAILED, Q, R, F...)
    reason: str = ""    # why (Slurm's reason, PBS's exit status), when given
    failed: bool = False  # ended with a failure the batch system reported


@dataclass
class JobOptions:
    """What one pilot job asks for and runs (filled into the template)."""

    connect: str                       # absolute path of the head's connection file
    nodes: int = 1
    walltime: float = 3600.0           # seconds
    cpus_per_node: int | None = None   # None: what the batch system gives (agent discovers)
    gpus_per_node: int | None = None
    partition: str | None = None       # Slurm partition / PBS queue
    account: str | None = None
    directives: list[str] = field(default_factory=list)
    idle_timeout: float = 60.0         # agents leave after this many idle seconds; 0: never
    job_name: str = "shoal-agents"
    output: str = "shoal-alloc-%j.out"  # Slurm writes %j as the job id
    shoal: Sequence[str] = (sys.executable, "-m", "shoal.cli.main")

    def agent_argv(self, walltime_flag: bool) -> list[str]:
        """The agent command line each node runs (without its --name, added per node)."""
        argv = [*self.shoal, "agent", "--connect", self.connect]
        if self.idle_timeout > 0:
            argv += ["--idle-timeout", f"{self.idle_timeout:g}"]
        if self.cpus_per_node is not None:
            argv += ["--slots", str(self.cpus_per_node)]
        if walltime_flag:  # the batch system tells the job no end time: say it
            argv += ["--walltime", str(int(self.walltime))]
        return argv


def hms(seconds: float) -> str:
    """``H:MM:SS`` (what both sbatch --time and PBS walltime accept), rounded up."""
    s = int(-(-seconds // 1))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def render(template: str, values: dict[str, str], where: str) -> str:
    """Fill ``{{name}}`` placeholders; an unknown name or a missing ``{{agent}}`` is a
    TemplateError naming ``where`` (the template file) and the line."""
    names = {m.group(1) for m in _PLACEHOLDER.finditer(template)}
    if "agent" not in names:
        raise TemplateError(f"{where}: no {{{{agent}}}} placeholder: the job would start no agent")
    for lineno, line in enumerate(template.splitlines(), 1):
        for m in _PLACEHOLDER.finditer(line):
            if m.group(1) not in values:
                raise TemplateError(f"{where}:{lineno}: unknown placeholder {{{{{m.group(1)}}}}} "
                                    f"(known: {', '.join(sorted(values))})")
    lines = []
    for line in template.splitlines(keepends=True):
        m = _PLACEHOLDER.fullmatch(line.strip())
        if m and values[m.group(1)] == "":
            continue  # a block placeholder with nothing in it leaves no blank line
        lines.append(_PLACEHOLDER.sub(lambda m: values[m.group(1)], line))
    return "".join(lines)


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ProviderError(f"{argv[0]}: command not found (is this a {argv[0]} login node?)")
    except subprocess.TimeoutExpired:
        raise ProviderError(f"{' '.join(argv[:2])}: no answer within {timeout:g} s")


def _err_text(r: subprocess.CompletedProcess[str], tool: str = "") -> str:
    """The error lines of a command on one line, without its own "tool: " prefixes."""
    lines = []
    for ln in (r.stderr or r.stdout or "").splitlines():
        ln = " ".join(ln.split())
        if tool and ln.startswith(tool + ":"):
            ln = ln[len(tool) + 1:].strip()
        if ln and ln not in lines:
            lines.append(ln)
    return "; ".join(lines) or f"exit status {r.returncode}"


class Provider:
    """Submit, watch and cancel pilot jobs of one batch system."""

    name = ""
    directive = ""        # the directive prefix of this batch system's scripts
    walltime_flag = False  # agents need --walltime (the job's end is not in its environment)

    def output_name(self, seq: int) -> str:
        """The job's output file name; Slurm fills in %j (the job id) itself."""
        return f"shoal-alloc-{seq}.out"

    def template_text(self) -> str:
        return resources.files("shoal.launch").joinpath(f"templates/{self.name}.sh").read_text()

    def options_block(self, o: JobOptions) -> list[str]:
        raise NotImplementedError

    def values(self, o: JobOptions) -> dict[str, str]:
        """The template's placeholders for ``o``."""
        directives = []
        for line in o.directives:
            line = line.strip()
            if line.startswith("-"):  # '--constraint=x' means '#SBATCH --constraint=x'
                line = f"{self.directive} {line}"
            if not line.startswith(self.directive + " "):
                raise TemplateError(f"--directive {line!r}: a {self.name} directive starts with "
                                    f"'{self.directive} ' (or give only the option: --constraint=x)")
            directives.append(line)
        return {
            "job_name": o.job_name, "nodes": str(o.nodes), "walltime": hms(o.walltime),
            "walltime_seconds": str(int(o.walltime)), "output": o.output,
            "connect": shlex.quote(o.connect), "idle_timeout": f"{o.idle_timeout:g}",
            "cpus_per_node": str(o.cpus_per_node or ""), "gpus_per_node": str(o.gpus_per_node or ""),
            "partition": o.partition or "", "account": o.account or "",
            "options": "\n".join(self.options_block(o)), "directives": "\n".join(directives),
            "agent": shlex.join(o.agent_argv(self.walltime_flag)),
        }

    def script(self, o: JobOptions, template: str | None = None, where: str = "") -> str:
        """The job script for ``o`` from ``template`` (default: the shipped one)."""
        text = self.template_text() if template is None else template
        return render(text, self.values(o), where or f"the {self.name} template")

    # -- the batch system's commands -------------------------------------------------------
    def submit(self, script_path: str) -> str:
        """Submit the script; its job id. ProviderError holds the batch system's error text."""
        raise NotImplementedError

    def status(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        """The status of each job id; a job the batch system no longer lists is ENDED."""
        raise NotImplementedError

    def cancel(self, job_ids: Iterable[str]) -> str:
        """Cancel the jobs; the error text, '' when it worked."""
        raise NotImplementedError


# ---- Slurm ---------------------------------------------------------------------------------
_SLURM_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                  "RESV_DEL_HOLD", "SUSPENDED", "STOPPED", "SPECIAL_EXIT", "RESIZING", "SIGNALING"}
_SLURM_RUNNING = {"RUNNING"}
_SLURM_OK = {"COMPLETED", "COMPLETING", "CANCELLED"}  # ended, not by a failure of the job


def parse_sbatch(out: str) -> str:
    """The job id from ``sbatch --parsable`` ("123" or "123;cluster")."""
    text = out.strip().splitlines()[-1].strip() if out.strip() else ""
    job = text.split(";", 1)[0]
    if not job.isdigit():
        raise ProviderError(f"sbatch printed no job id: {out.strip()!r}")
    return job


def parse_squeue(out: str) -> dict[str, JobStatus]:
    """``squeue -h -t all -o %i|%T|%r`` lines -> status per job id."""
    jobs: dict[str, JobStatus] = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 2 or not parts[0]:
            continue
        job, state = parts[0], parts[1].strip().upper()
        reason = parts[2].strip() if len(parts) > 2 else ""
        reason = "" if reason in ("None", "(null)") else reason
        if state in _SLURM_PENDING:
            jobs[job] = JobStatus(PENDING, state, reason)
        elif state in _SLURM_RUNNING:
            jobs[job] = JobStatus(RUNNING, state, reason)
        else:  # COMPLETED, FAILED, TIMEOUT, NODE_FAIL, BOOT_FAIL, OUT_OF_MEMORY, ...
            jobs[job] = JobStatus(ENDED, state, reason, failed=state not in _SLURM_OK)
    return jobs


class Slurm(Provider):
    name = "slurm"
    directive = "#SBATCH"

    def output_name(self, seq: int) -> str:
        return "shoal-alloc-%j.out"

    def options_block(self, o: JobOptions) -> list[str]:
        lines = []
        if o.partition:
            lines.append(f"#SBATCH --partition={o.partition}")
        if o.account:
            lines.append(f"#SBATCH --account={o.account}")
        if o.cpus_per_node:
            lines.append(f"#SBATCH --cpus-per-task={o.cpus_per_node}")
        if o.gpus_per_node:
            lines.append(f"#SBATCH --gpus-per-node={o.gpus_per_node}")
        return lines

    def submit(self, script_path: str) -> str:
        r = _run(["sbatch", "--parsable", script_path])
        if r.returncode != 0:
            raise ProviderError(f"sbatch {script_path}: {_err_text(r, 'sbatch')}")
        return parse_sbatch(r.stdout)

    def status(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        ids = list(job_ids)
        if not ids:
            return {}
        r = _run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%r"])
        if r.returncode != 0 and "Invalid job id" not in (r.stderr or ""):
            raise ProviderError(f"squeue: {_err_text(r, 'squeue')}")
        found = parse_squeue(r.stdout) if r.returncode == 0 else {}
        # a job purged from the controller's memory (MinJobAge) is no longer listed
        return {j: found.get(j, JobStatus(ENDED, "gone")) for j in ids}

    def cancel(self, job_ids: Iterable[str]) -> str:
        ids = list(job_ids)
        if not ids:
            return ""
        r = _run(["scancel", *ids])
        return "" if r.returncode == 0 else f"scancel: {_err_text(r, 'scancel')}"


# ---- PBS -----------------------------------------------------------------------------------
_PBS_PENDING = set("QHWTSUM")   # queued, held, waiting, transit, suspended, user-suspended, moved
_PBS_RUNNING = set("RB")        # running, array begun
_PBS_ENDED = set("ECFX")        # exiting, completed (Torque), finished (PBS Pro -x), expired


def parse_qsub(out: str) -> str:
    """The job id from ``qsub`` ("1234.server")."""
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
    job = lines[-1] if lines else ""
    if not re.fullmatch(r"\d+(\[\d*\])?(\.[\w.-]+)?", job):
        raise ProviderError(f"qsub printed no job id: {out.strip()!r}")
    return job


def parse_qstat(out: str) -> dict[str, JobStatus]:
    """``qstat -f`` blocks ("Job Id: 1234.server" then "key = value" lines, long values
    continued on tab-indented lines) -> status per job id."""
    jobs: dict[str, dict[str, str]] = {}
    cur: dict[str, str] | None = None
    key = ""
    for raw in out.splitlines():
        if raw.startswith("Job Id:"):
            cur = jobs.setdefault(raw.split(":", 1)[1].strip(), {})
            key = ""
        elif cur is not None and raw.startswith("\t") and key:  # continuation of a long value
            cur[key] += raw.strip()
        elif cur is not None and " = " in raw:
            key, _, value = raw.strip().partition(" = ")
            cur[key] = value.strip()
    result: dict[str, JobStatus] = {}
    for job, attrs in jobs.items():
        attrs = {k.lower(): v for k, v in attrs.items()}  # Torque: exit_status, PBS Pro: Exit_status
        state = attrs.get("job_state", "").upper()
        exit_status = attrs.get("exit_status", "")
        if state in _PBS_PENDING:
            result[job] = JobStatus(PENDING, state, attrs.get("comment", ""))
        elif state in _PBS_RUNNING:
            result[job] = JobStatus(RUNNING, state, "")
        else:
            failed = exit_status not in ("", "0")
            result[job] = JobStatus(ENDED, state or "?", f"Exit_status={exit_status}"
                                    if exit_status else "", failed=failed)
    return result


def _same_pbs_job(a: str, b: str) -> bool:
    """qstat may print "1234.server.domain" for "1234.server" (or the reverse)."""
    return a == b or a.split(".", 1)[0] == b.split(".", 1)[0]


class PBS(Provider):
    name = "pbs"
    directive = "#PBS"
    walltime_flag = True

    def values(self, o: JobOptions) -> dict[str, str]:
        v = super().values(o)
        sel = ""
        if o.cpus_per_node:
            sel += f":ncpus={o.cpus_per_node}"
        if o.gpus_per_node:
            sel += f":ngpus={o.gpus_per_node}"
        v["select"] = sel
        return v

    def options_block(self, o: JobOptions) -> list[str]:
        lines = []
        if o.partition:
            lines.append(f"#PBS -q {o.partition}")
        if o.account:
            lines.append(f"#PBS -A {o.account}")
        return lines

    def submit(self, script_path: str) -> str:
        r = _run(["qsub", script_path])
        if r.returncode != 0:
            raise ProviderError(f"qsub {script_path}: {_err_text(r, 'qsub')}")
        return parse_qsub(r.stdout)

    def status(self, job_ids: Iterable[str]) -> dict[str, JobStatus]:
        ids = list(job_ids)
        if not ids:
            return {}
        r = _run(["qstat", "-f", *ids])
        # a finished or purged id gets an error line ("Unknown Job Id", "Job has finished");
        # the others are still printed
        errors = [ln for ln in (r.stderr or "").splitlines() if ln.strip()]
        if r.returncode != 0 and not all(any(j in ln for j in ids) for ln in errors):
            raise ProviderError(f"qstat: {_err_text(r, 'qstat')}")
        found = parse_qstat(r.stdout)
        out = {}
        for j in ids:
            match = next((s for k, s in found.items() if _same_pbs_job(k, j)), None)
            out[j] = match or JobStatus(ENDED, "gone")
        return out

    def cancel(self, job_ids: Iterable[str]) -> str:
        ids = list(job_ids)
        if not ids:
            return ""
        r = _run(["qdel", *ids])
        return "" if r.returncode == 0 else f"qdel: {_err_text(r, 'qdel')}"


PROVIDERS: dict[str, type[Provider]] = {"slurm": Slurm, "pbs": PBS}


def get(name: str) -> Provider:
    """The provider called ``name`` ("slurm", "pbs")."""
    try:
        return PROVIDERS[name]()
    except KeyError:
        raise ValueError(f"unknown batch system {name!r} (known: {', '.join(PROVIDERS)})")


def detect(environ: dict[str, str] | None = None) -> str | None:
    """The batch system whose client commands are on PATH (Slurm first), or None."""
    import shutil

    path = (environ or os.environ).get("PATH")
    if shutil.which("sbatch", path=path):
        return "slurm"
    if shutil.which("qsub", path=path):
        return "pbs"
    return None
