"""Reroute the interpreter to a node-local bundle root (python-mpi-bcast's Table 1).

``PYTHONHOME`` is set to the root; ``PYTHONPATH`` is purged (each entry costs a stat per
import on the shared file system); the user site is disabled and ``PYTHONUSERBASE`` points
at a path that does not exist on the local disk (otherwise ``~/.local`` -- often the
slowest file system -- is searched); ``PATH`` and ``LD_LIBRARY_PATH`` get the root's
``bin`` and ``lib`` first.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from .archive import BundleError

# variables that would send the rerouted interpreter back to the shared prefix
PURGED = ("PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONSTARTUP", "__PYVENV_LAUNCHER__")


def python_executable(root: Path | str) -> Path:
    """The interpreter inside an unpacked bundle root (``ROOT/bin/pythonX.Y``)."""
    root = Path(root)
    bindir = root / "bin"
    cands = sorted(bindir.glob("python3.*"), key=lambda p: len(p.name)) if bindir.is_dir() else []
    for p in cands + [bindir / "python3", bindir / "python"]:
        if p.exists() and os.access(p, os.X_OK) and not p.name.endswith("-config"):
            return p
    raise BundleError(f"{root}: not an unpacked bundle root (no bin/python3 in it; run `shoal bcast` first)")


def _prepend(value: str | None, first: str) -> str:
    rest = [p for p in (value or "").split(os.pathsep) if p and p != first]
    return os.pathsep.join([first, *rest])


def rerouted_environ(
    root: Path | str, base: Mapping[str, str] | None = None, *, safe_path: bool = False
) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) in which Python runs from ``root``.

    Start agents and workers with it (``subprocess.Popen([python_executable(root), ...],
    env=rerouted_environ(root))``) and every import is served from node-local storage.
    ``safe_path`` also sets PYTHONSAFEPATH so the current directory is not on sys.path.
    """
    root = Path(os.path.abspath(root))  # keep a symlinked root as given: it is the live one
    python_executable(root)  # fail early with a clear message when nothing is there
    env = dict(os.environ if base is None else base)
    for k in PURGED:
        env.pop(k, None)
    env["PYTHONHOME"] = str(root)
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONUSERBASE"] = str(root / ".shoal" / "no-user-base")
    env["PATH"] = _prepend(env.get("PATH"), str(root / "bin"))
    env["LD_LIBRARY_PATH"] = _prepend(env.get("LD_LIBRARY_PATH"), str(root / "lib"))
    env["SHOAL_BUNDLE_ROOT"] = str(root)
    if (root / "app").is_dir():
        env["SHOAL_APP"] = str(root / "app")
    if safe_path:
        env["PYTHONSAFEPATH"] = "1"
    return env


def shell_exports(root: Path | str, *, safe_path: bool = False, trap: bool = False) -> str:
    """Shell lines that reroute the current shell (for ``eval "$(shoal env --root R)"``).

    ``trap`` adds an EXIT trap that removes the node-local copies at the end of the job; it
    runs with the environment from before the rerouting, through ``shoal bcast --cleanup``.
    """
    root = Path(os.path.abspath(root))
    python_executable(root)
    q = shlex.quote
    r = str(root)
    lines = []
    if trap:
        # capture the pre-reroute interpreter and environment now; the trap runs after
        keep = {k: os.environ[k] for k in ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH") if k in os.environ}
        unset = " ".join(f"-u {k}" for k in ("PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
                                             "LD_LIBRARY_PATH", "PYTHONPATH"))
        assigns = " ".join(f"{k}={q(v)}" for k, v in keep.items())
        cmd = f"env {unset} {assigns} {q(sys.executable)} -m shoal.cli.main bcast --cleanup --to {q(r)}"
        lines.append(f"trap {q(cmd)} EXIT")
    for k in PURGED:
        lines.append(f"unset {k}")
    lines += [
        f"export PYTHONHOME={q(r)}",
        "export PYTHONNOUSERSITE=1",
        f"export PYTHONUSERBASE={q(r + '/.shoal/no-user-base')}",
        f"export PATH={q(r + '/bin')}${{PATH:+:$PATH}}",
        f"export LD_LIBRARY_PATH={q(r + '/lib')}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}",
        f"export SHOAL_BUNDLE_ROOT={q(r)}",
    ]
    if (root / "app").is_dir():
        lines.append(f"export SHOAL_APP={q(r + '/app')}")
    if safe_path:
        lines.append("export PYTHONSAFEPATH=1")
    return "\n".join(lines) + "\n"
