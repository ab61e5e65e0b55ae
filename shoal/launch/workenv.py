"""The environment agents give their workers and commands: SCOOP's ``--prolog``,
``--pythonpath`` and ``--path`` (``python -m shoal``; ``Executor(prolog=, pythonpath=,
workdir=)``).

What is carried, exactly:

- **prolog**: a shell script sourced once per agent start, on the agent's node, in the
  agent's working directory, by ``bash`` (``sh`` where there is none): ``env -0`` before
  and after ``. SCRIPT`` in one shell, and every variable the script set, changed,
  exported or unset is applied to the agent's environment, which its warm workers and
  its commands inherit. Not carried: the shell's own bookkeeping (``_``, ``SHLVL``,
  ``PWD``, ``OLDPWD``: a ``cd`` in the script does not move the agent), shell functions
  and variables not exported. The script's output goes to stderr. A non-zero status of
  its last command, an ``exit``, or a run past :data:`PROLOG_TIMEOUT` is a one-line
  :class:`PrologError` naming the script, the node, the status and the script's last
  line of output. The program ``python -m shoal`` runs keeps the environment it was
  started in (source the script in your shell for that).
- **pythonpath**: directories put first on the workers' ``sys.path`` and on the agent's
  ``PYTHONPATH`` (so Python programs run as commands see them too); not on the
  program's own path.
- **workdir**: the directory agents, their workers and their commands run in (default:
  the caller's current one); a command's own ``cwd=`` still wins.

Paths are made absolute on the calling side; on a cluster they must name the same files
on every node (a shared file system).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["PROLOG_TIMEOUT", "PrologError", "WorkerEnv", "apply_environment", "source_prolog"]

PROLOG_TIMEOUT = 120.0  # seconds a prolog may take (a `module load` takes a few)
# set by the shell itself, not by the script: never carried
_SHELL_OWN = frozenset({"_", "SHLVL", "PWD", "OLDPWD"})
# env before, an empty entry, env after: `. "$1"` keeps the script's stdout off ours
_SCRIPT = 'env -0; printf "\\0"; . "$1" >&2 || exit $?; env -0'


class PrologError(ValueError):
    """A prolog that could not be run or failed (one line: script, node, status, output)."""


@dataclass(frozen=True)
class WorkerEnv:
    """Worker environment set-up; build it with :meth:`make` (checks and absolute paths)."""

    prolog: str | None = None
    pythonpath: tuple[str, ...] = ()
    workdir: str | None = None

    @classmethod
    def make(cls, prolog: str | os.PathLike[str] | None = None,
             pythonpath: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
             workdir: str | os.PathLike[str] | None = None) -> WorkerEnv | None:
        """None when nothing is given. ``pythonpath``: a directory, a ``PYTHONPATH``-style
        string (``a:b``) or a list of either. ValueError (one line) for an empty value."""
        dirs: list[str] = []
        if pythonpath is not None:
            items = [pythonpath] if isinstance(pythonpath, (str, os.PathLike)) else list(pythonpath)
            for item in items:
                dirs += [os.path.abspath(p) for p in os.fspath(item).split(os.pathsep) if p]
            if not dirs:
                raise ValueError("pythonpath: no directory given")
        script = None
        if prolog is not None:
            if not os.fspath(prolog):
                raise ValueError("prolog: no script given")
            script = os.path.abspath(os.fspath(prolog))
        where = None
        if workdir is not None:
            if not os.fspath(workdir):
                raise ValueError("workdir: no directory given")
            where = os.path.abspath(os.fspath(workdir))
        if script is None and not dirs and where is None:
            return None
        return cls(script, tuple(dict.fromkeys(dirs)), where)

    def check_local(self) -> None:
        """ValueError (one line) for a script or directory missing on this machine."""
        if self.prolog is not None and not os.path.isfile(self.prolog):
            raise PrologError(f"prolog {self.prolog}: no such file")
        for d in self.pythonpath:
            if not os.path.isdir(d):
                raise ValueError(f"pythonpath {d}: no such directory")
        if self.workdir is not None and not os.path.isdir(self.workdir):
            raise ValueError(f"workdir {self.workdir}: no such directory")

    def environment(self, base: Mapping[str, str], where: str) -> dict[str, str]:
        """``base`` as the agent on ``where`` gets it: the prolog's changes applied (run in
        :attr:`workdir`), then :attr:`pythonpath` put first on ``PYTHONPATH``."""
        env = dict(base)
        if self.prolog is not None:
            env = source_prolog(self.prolog, env, cwd=self.workdir, where=where)
        if self.pythonpath:
            old = env.get("PYTHONPATH")
            env["PYTHONPATH"] = os.pathsep.join([*self.pythonpath, *([old] if old else [])])
        return env

    def sys_path(self, path: Sequence[str]) -> list[str]:
        """The workers' import path: :attr:`pythonpath` first, then ``path``."""
        return [*self.pythonpath, *(p for p in path if p not in self.pythonpath)]

    def node_args(self) -> list[str]:
        """The flags of ``python -m shoal.launch.cluster`` that carry this to each node."""
        args: list[str] = []
        if self.prolog is not None:
            args += ["--prolog", self.prolog]
        for d in self.pythonpath:
            args += ["--pythonpath", d]
        if self.workdir is not None:
            args += ["--workdir", self.workdir]
        return args


def source_prolog(script: str, env: Mapping[str, str], *, cwd: str | None = None,
                  where: str = "this machine", timeout: float = PROLOG_TIMEOUT) -> dict[str, str]:
    """``env`` with what sourcing ``script`` changed in it (see the module docstring).
    The script's own output is written to stderr; PrologError (one line) if it fails."""
    shell = shutil.which("bash", path=env.get("PATH")) or "/bin/sh"
    try:
        done = subprocess.run([shell, "-c", _SCRIPT, "shoal-prolog", script], env=dict(env),
                              cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise PrologError(f"prolog {script} did not finish within {timeout:g} s on {where}"
                          f"{_said(exc.stderr or b'')}") from None
    except OSError as exc:
        raise PrologError(f"prolog {script}: cannot run {shell} on {where} in {cwd or '.'}: "
                          f"{exc.strerror}") from None
    said = done.stderr
    entries = done.stdout.split(b"\0")
    try:
        cut = entries.index(b"")
    except ValueError:
        cut = -1
    if done.returncode != 0 or cut < 0 or not any(entries[cut + 1:]):
        if done.returncode == 0:  # the script ended the shell with `exit 0`
            raise PrologError(f"prolog {script} ended its shell on {where} (`exit`) before its "
                              f"environment could be read: source-able scripts end without `exit`"
                              f"{_said(said)}")
        raise PrologError(f"prolog {script} failed on {where} (exit status {done.returncode})"
                          f"{_said(said)}")
    if said:
        sys.stderr.write(said.decode(errors="replace"))
        sys.stderr.flush()
    before = _parse(entries[:cut])
    after = _parse(entries[cut + 1:])
    out = dict(env)
    for k, v in after.items():
        if k not in _SHELL_OWN and before.get(k) != v:
            out[k] = v
    for k in before.keys() - after.keys() - _SHELL_OWN:
        out.pop(k, None)
    return out


def apply_environment(env: Mapping[str, str]) -> None:
    """Make ``os.environ`` equal ``env`` (what this process's children inherit)."""
    for k in list(os.environ):
        if k not in env:
            del os.environ[k]
    for k, v in env.items():
        if os.environ.get(k) != v:
            os.environ[k] = v


def _parse(entries: list[bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in entries:
        if raw:
            k, _, v = os.fsdecode(raw).partition("=")
            out[k] = v
    return out


def _said(stderr: bytes) -> str:
    lines = [ln.strip() for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    return f": {lines[-1]}" if lines else " (no output)"
