"""Reading files a job (or the data directory) may have made hostile: every path component is
opened with ``O_NOFOLLOW`` relative to the one before, so a symbolic link a job planted (to
``/etc/shadow``, to another job's directory) is never followed, even if it appears between a
check and the open. Only regular files are served."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

_NAME = re.compile(r"[A-Za-z0-9._+@=,-]+")


class BadPath(ValueError):
    """A path a client gave that is not a plain relative path (one line)."""


def check_relpath(rel: str, what: str = "path") -> list[str]:
    """The components of a relative path made of plain names (no ``..``, no empty or hidden
    component tricks, no absolute paths); raises :class:`BadPath`."""
    if not rel or rel.startswith("/") or len(rel) > 4096:
        raise BadPath(f"{what} {rel!r}: give a relative path like 'dir/file.nc'")
    parts = rel.split("/")
    for p in parts:
        if p in ("", ".", "..") or not _NAME.fullmatch(p):
            raise BadPath(f"{what} {rel!r}: each part must be a plain name of letters, digits "
                          "and ._+@=,- (no '..', no empty parts)")
    return parts


def open_under(root: Path, rel: str) -> tuple[int, os.stat_result]:
    """Open the regular file ``root/rel`` for reading without following any link below
    ``root``; returns (fd, stat). Raises FileNotFoundError for anything else."""
    parts = check_relpath(rel)
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for p in parts[:-1]:
            nfd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        # O_NONBLOCK: a FIFO a job left must not hang the service on open
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError as exc:
        raise FileNotFoundError(f"{rel}: no such file ({exc.strerror})")
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileNotFoundError(f"{rel}: not a regular file")
    os.set_blocking(fd, True)
    return fd, st


def listing(root: Path, limit: int = 10000) -> tuple[list[dict[str, object]], bool]:
    """Directories and regular files under ``root`` (links not followed, hidden names
    included), sorted, at most ``limit``; returns (entries, truncated)."""
    out: list[dict[str, object]] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(root / rel if rel else root) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for e in entries:
            r = f"{rel}/{e.name}" if rel else e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                out.append({"name": r, "type": "dir"})
                subdirs.append(r)
            elif stat.S_ISREG(st.st_mode):
                out.append({"name": r, "type": "file", "size": st.st_size,
                            "mtime": st.st_mtime})
            else:
                continue
            if len(out) >= limit:
                return out, True
        stack.extend(reversed(subdirs))
    return out, False


def job_files(work: Path, limit: int = 10000) -> tuple[list[dict[str, object]], bool]:
    """The job's files and directories, less the runner's scratch trees (a running job's)."""
    entries, truncated = listing(work, limit)
    return [e for e in entries
            if not str(e["name"]).split("/", 1)[0].startswith(".shoal-scratch-")], truncated
