"""Node-local install of bundles: staging, atomic switch, cleanup.

``DEST`` (e.g. ``/dev/shm/$USER/shoal``) is a symbolic link to a generation directory
``.DEST.shoal-XXXX`` beside it. Bundles are unpacked into a fresh staging directory, in
order (later bundles overlay earlier ones), verified, and only then is ``DEST`` switched
to it with one ``rename`` -- so nothing half-unpacked is ever reachable through ``DEST``.
Everything is created owner-only (0700).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .archive import BundleError, expected_digest, iter_file_chunks, unpack_stream

_TAG = ".shoal-"  # generation and staging directories: .<name>.shoal-<random>


def _siblings_prefix(dest: Path) -> str:
    return f".{dest.name}{_TAG}"


def _made_record(dest: Path) -> Path:
    return dest.parent / f".{dest.name}{_TAG}made"


def ensure_parent(dest: Path) -> None:
    """Create missing parents owner-only, remembering which, so cleanup can remove them."""
    missing = []
    p = dest.parent
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:  # another receiver on this node made it first
            pass
    if missing:
        rec = _made_record(dest)
        old = rec.read_text().split("\n") if rec.exists() else []
        rec.write_text("\n".join(dict.fromkeys(old + [str(d) for d in missing])).strip() + "\n")
        os.chmod(rec, 0o600)
    if not os.access(dest.parent, os.W_OK | os.X_OK):
        raise BundleError(f"{dest.parent}: not writable, cannot install bundles there")


def current_generation(dest: Path) -> Path | None:
    """The generation directory ``dest`` points to, or None when nothing is installed."""
    if dest.is_symlink():
        target = dest.parent / os.readlink(dest)
        return target if target.is_dir() else None
    if dest.exists():
        if dest.is_dir() and not any(dest.iterdir()):
            return None
        raise BundleError(f"{dest}: exists and is not a shoal bundle root (remove it or pick another --to)")
    return None


def new_stage(dest: Path, overlay: bool = True, name: str | None = None) -> Path:
    """A private staging directory beside ``dest``; with ``overlay`` it starts as a copy of
    what is installed now, so new bundles add to it instead of replacing it. ``name``
    gives it a fixed name (``.DEST.shoal-NAME``) that later steps can find it by."""
    dest = Path(os.path.abspath(dest))
    ensure_parent(dest)
    cur = current_generation(dest)
    if name is None:
        stage = Path(tempfile.mkdtemp(prefix=_siblings_prefix(dest), dir=dest.parent))
    else:
        stage = dest.parent / f"{_siblings_prefix(dest)}{name}"
        stage.mkdir(mode=0o700)
    os.chmod(stage, 0o700)
    if overlay and cur is not None:
        shutil.copytree(cur, stage, symlinks=True, dirs_exist_ok=True)
    return stage


# Runs in the staging directory's own interpreter: conda-pack's generated ``bin/conda-unpack``
# (loaded as a module, so its ``__main__`` part does not run) rewrites each recorded file
# with its own ``update_prefix``, but for DEST, the stable path, instead of the directory
# the script lies in (a generation directory that the next overlay replaces). Rewritten
# ``.py`` files are compiled again, so no stale cache of them remains. (Without conda's
# package cache, conda-pack records every text file; most hold no prefix and are skipped.)
_CONDA_UNPACK = r"""
import os, py_compile, runpy, sys
stage, prefix = sys.argv[1], sys.argv[2]
bindir = os.path.join(stage, "bin")
sys.path.insert(0, bindir)
g = runpy.run_path(os.path.join(bindir, "conda-unpack"), run_name="conda_unpack")
for path, placeholder, mode in g["_prefix_records"]:
    full = os.path.join(stage, path)
    with open(full, "rb") as f:
        if placeholder.encode() not in f.read():
            continue
    g["update_prefix"](full, prefix, placeholder, mode=mode)
    if path.endswith(".py") and path.startswith("lib/"):
        try:
            py_compile.compile(full, dfile=os.path.join(prefix, path), doraise=True)
        except Exception:
            pass
"""


def _conda_unpack_environ() -> dict[str, str]:
    # the receiver may itself run rerouted (an agent started with --bundle, or under
    # `shoal env`): another root's PYTHONHOME or libpython must not leak into this interpreter
    drop = ("LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV", "CONDA_PREFIX")
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k not in drop}


def finalize_stage(stage: Path, dest: Path | str | None = None) -> None:
    """Last fixes before a staging directory goes live: a conda-pack'ed tier 1 has the
    prefixes conda-pack recorded rewritten, with conda-unpack's own code, for ``dest``
    (the path the root will be used by; the staging directory itself without it)."""
    marker = stage / ".shoal" / "conda-unpack-pending"
    if not marker.exists():
        return
    prefix = os.path.abspath(dest if dest is not None else stage)
    python, script = stage / "bin" / "python", stage / "bin" / "conda-unpack"
    if not (os.path.exists(python) and script.is_file()):
        raise BundleError(f"{stage}: conda tier 1 without bin/python or bin/conda-unpack")
    try:
        r = subprocess.run([str(python), "-I", "-B", "-c", _CONDA_UNPACK, str(stage), prefix],
                           capture_output=True, text=True, env=_conda_unpack_environ(), cwd=stage,
                           timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BundleError(f"{stage}: conda-unpack failed: {exc}")
    if r.returncode != 0:
        raise BundleError(f"{stage}: conda-unpack failed: {r.stderr.strip()[-500:]}")
    marker.unlink()


def commit(dest: Path, stage: Path) -> None:
    """Point ``dest`` at ``stage`` with one atomic rename, then drop the old generation."""
    dest = Path(os.path.abspath(dest))
    old = current_generation(dest)
    if dest.is_dir() and not dest.is_symlink():  # an empty directory made by someone: replace it
        dest.rmdir()
    link = dest.parent / f"{_siblings_prefix(dest)}link-{os.getpid()}"
    link.unlink(missing_ok=True)
    os.symlink(stage.name, link)
    os.replace(link, dest)
    if old is not None and old != stage:
        shutil.rmtree(old, ignore_errors=True)


def discard(stage: Path) -> None:
    """Remove a staging directory after a failure."""
    shutil.rmtree(stage, ignore_errors=True)


def made_parents(dest: Path) -> list[Path]:
    """The parent directories shoal created for ``dest`` (removed by cleanup when empty)."""
    rec = _made_record(Path(os.path.abspath(dest)))
    return [Path(p) for p in rec.read_text().split()] if rec.exists() else []


def remove_empty(dirs: list[Path]) -> list[Path]:
    """Remove those of ``dirs`` that are empty, deepest first; return the ones removed."""
    removed = []
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()  # only when empty: other users' or jobs' files are never touched
            removed.append(d)
        except OSError:
            pass
    return removed


def cleanup(dest: Path, parents: bool = True) -> list[Path]:
    """Remove ``dest``, every generation or staging directory of it, and (with ``parents``)
    the parent directories shoal created for it when they are empty; return what went."""
    dest = Path(os.path.abspath(dest))
    removed: list[Path] = []
    parent = dest.parent
    made = made_parents(dest)
    if dest.is_symlink():
        dest.unlink()
        removed.append(dest)
    if parent.is_dir():
        for p in parent.iterdir():
            if p.name.startswith(_siblings_prefix(dest)):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                removed.append(p)
    if parents:
        removed += remove_empty(made)
    return removed


@contextlib.contextmanager
def staged_install(dest: Path | str, *, overlay: bool = True) -> Iterator[Path]:
    """Yield a staging directory for ``dest``; switch ``dest`` to it when the block ends
    normally, throw it away when it raises. For receivers that get bytes from elsewhere
    (shoal agents): feed a ``StreamUnpacker(stage, name)`` per bundle and ``finish`` it."""
    dest = Path(os.path.abspath(dest))
    stage = new_stage(dest, overlay=overlay)
    try:
        yield stage
        finalize_stage(stage, dest)
        commit(dest, stage)
    except BaseException:
        discard(stage)
        raise


@dataclass
class UnpackReport:
    """What one node did: bytes and seconds per bundle, and the final root."""

    dest: Path
    bundles: list[str] = field(default_factory=list)
    nbytes: int = 0
    seconds: float = 0.0


def unpack_bundles(
    bundles: Sequence[Path | str], dest: Path | str, *, overlay: bool = True,
    digests: Sequence[str] | None = None,
) -> UnpackReport:
    """Verify and unpack bundle files into ``dest`` on this node, in order, atomically.

    This is what every receiver does with bundles that are already on local storage
    (the ``local`` and ``sbcast`` transports, and shoal agents). Raises BundleError and
    leaves ``dest`` as it was when any bundle is missing, corrupt or truncated.
    ``digests`` gives the expected sha256 of each bundle when no sidecar file travelled with it.
    """
    dest = Path(os.path.abspath(dest))
    paths = [Path(b) for b in bundles]
    for p in paths:
        if not p.is_file():
            raise BundleError(f"{p}: no such bundle file")
    digests = list(digests) if digests is not None else [expected_digest(p) for p in paths]
    if len(digests) != len(paths):
        raise BundleError(f"{len(paths)} bundles but {len(digests)} checksums")
    t0 = time.perf_counter()
    rep = UnpackReport(dest)
    with staged_install(dest, overlay=overlay) as stage:
        for p, d in zip(paths, digests, strict=True):
            rep.nbytes += unpack_stream(iter_file_chunks(p), stage, p.name, d)
            rep.bundles.append(p.name)
    rep.seconds = time.perf_counter() - t0
    return rep
