"""Top level of the compiler: script file -> :class:`Plan` (steps, DAG, clusters)."""

from __future__ import annotations

import gc
import os
import shutil
import time
from dataclasses import dataclass, field

from .cluster import Cluster, partition
from .dag import Dag, build_dag
from .errors import ScriptError
from .interp import Interpreter
from .model import Step
from .semantics import Semantics
from .staging import Staging, analyze, mark_errexit


@dataclass
class CompileOptions:
    """How to compile.

    ``workdir`` is the working tree (default: ``cwd``); ``--strict`` rejects unknown programs and
    writes outside it. ``commands`` are extra command tables (TOML).
    """

    cwd: str = "."
    workdir: str | None = None
    strict: bool = False
    commands: list[str] = field(default_factory=list)
    clustering: str = "chains"
    environ: dict[str, str] | None = None


@dataclass
class Plan:
    """A compiled script."""

    script: str
    dag: Dag
    clusters: list[Cluster]
    unknown: dict[str, list[int]]
    warnings: list[str]
    exit_status: int | None
    timings: dict[str, float]
    # the status of the script's last statement when it is known at compile time (None: that
    # of the last command that ran)
    last_status: int | None = 0
    shell: str = "/bin/bash"      # the script's interpreter: chains run under it
    staging: Staging = field(default_factory=Staging)
    observed: dict[str, int] = field(default_factory=dict)  # see interp Result.observed

    @property
    def steps(self) -> list[Step]:
        """The commands, in script order."""
        return self.dag.steps

    def unknown_warning(self) -> str | None:
        """The one warning about unknown programs (run as barriers), or None."""
        if not self.unknown:
            return None
        parts = []
        for prog, lines in sorted(self.unknown.items()):
            shown = ", ".join(str(n) for n in sorted(set(lines))[:10])
            more = "" if len(set(lines)) <= 10 else ", ..."
            parts.append(f"{prog} (line {shown}{more})")
        return (f"{self.script}: warning: unknown programs run as barriers (everything before "
                f"them finishes first, everything after waits): {'; '.join(parts)}")


def compile_source(source: bytes, script: str = "script", args: list[str] | None = None,
                   options: CompileOptions | None = None) -> Plan:
    """Compile shell ``source`` (named ``script`` in messages) run with ``args``."""
    opts = options or CompileOptions()
    # the compiler allocates many small long-lived objects: the cyclic GC would rescan them
    # again and again for nothing (there are no reference cycles to free)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _compile(source, script, args, opts)
    finally:
        if gc_was_enabled:
            gc.enable()


def _compile(source: bytes, script: str, args: list[str] | None, opts: CompileOptions) -> Plan:
    cwd = os.path.abspath(opts.cwd)
    workdir = os.path.abspath(opts.workdir or cwd)
    t0 = time.perf_counter()
    sem = Semantics(opts.commands)
    interp = Interpreter(sem, cwd, workdir, script, args, opts.strict, opts.environ)
    t1 = time.perf_counter()
    result = interp.run_source(source)
    t2 = time.perf_counter()
    errexit = mark_errexit(result.steps, script)
    dag = build_dag(result.steps, workdir)
    staging = analyze(dag, errexit)
    t3 = time.perf_counter()
    # in-order steps start their own clusters, which the runner releases in script order;
    # SWAMP's clusters may wait in their middle, which that order could deadlock
    algorithm = "chains" if staging.in_order and opts.clustering == "swamp" else opts.clustering
    clusters = partition(dag, algorithm, staging.in_order)
    t4 = time.perf_counter()
    return Plan(script, dag, clusters, result.unknown, result.warnings, result.exit_status,
                {"setup": t1 - t0, "interpret": t2 - t1, "dag": t3 - t2, "cluster": t4 - t3,
                 "total": t4 - t0}, last_status=interp.last_status,
                shell=interpreter(source), staging=staging, observed=result.observed)


def interpreter(source: bytes) -> str:
    """The bash that runs the chains: the script's ``#!`` if it names a bash, else the
    ``bash`` on PATH (chains need bash: ``echo -e``, ``printf -v``, ``pipefail``...)."""
    first = source.split(b"\n", 1)[0].decode(errors="replace")
    if first.startswith("#!"):
        words = first[2:].split()
        if words and os.path.basename(words[0]) == "bash" and os.access(words[0], os.X_OK):
            return words[0]
    return shutil.which("bash") or "/bin/bash"


def compile_script(path: str, args: list[str] | None = None,
                   options: CompileOptions | None = None) -> Plan:
    """Compile the script file ``path``."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise ScriptError(f"cannot read script: {exc.strerror}", script=path)
    return compile_source(source, path, args, options)
