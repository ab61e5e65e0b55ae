"""Archives of a job's outputs (tar, tar.gz, zip), written as a stream in a thread and sent
with back-pressure: any size in constant memory."""

from __future__ import annotations

import asyncio
import io
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from .files import job_files, open_under

ARCHIVES = {"tar": ("application/x-tar", "tar"), "tgz": ("application/gzip", "tar.gz"),
             "zip": ("application/zip", "zip")}


def write_archive(out: io.RawIOBase, work: Path, fmt: str) -> None:
    """Write the job's files as a ``tar``, ``tgz`` or ``zip`` stream to ``out``; every file is
    opened without following links (:func:`open_under`)."""
    entries, _ = job_files(work, limit=1 << 30)
    if fmt == "zip":
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1,
                             allowZip64=True) as zf:
            for e in entries:
                if e["type"] != "file":
                    continue
                try:
                    fd, st = open_under(work, str(e["name"]))
                except FileNotFoundError:
                    continue
                info = zipfile.ZipInfo(str(e["name"]), time.localtime(st.st_mtime)[:6])
                info.compress_type = zipfile.ZIP_DEFLATED
                info.file_size = st.st_size
                with open(fd, "rb") as src, zf.open(info, "w", force_zip64=True) as dst:
                    _copy(src, dst, st.st_size)
        return
    with tarfile.open(fileobj=out, mode="w|gz" if fmt == "tgz" else "w|",  # type: ignore[call-overload]
                      format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            name = str(e["name"])
            if e["type"] == "dir":
                ti = tarfile.TarInfo(name)
                ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                tf.addfile(ti)
                continue
            try:
                fd, st = open_under(work, name)
            except FileNotFoundError:
                continue
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = st.st_size, 0o644, int(st.st_mtime)
            with open(fd, "rb") as src:
                tf.addfile(ti, _Exact(src, st.st_size))


class _Exact(io.RawIOBase):
    """At most ``n`` bytes of ``f``, zero-padded if it shrank (a tar member's size is fixed)."""

    def __init__(self, f: io.BufferedReader, n: int) -> None:
        self.f, self.left = f, n

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self.left <= 0:
            return 0
        want = min(len(b), self.left)
        data = self.f.read(want) or bytes(want)
        b[:len(data)] = data
        self.left -= len(data)
        return len(data)


def _copy(src: Any, dst: Any, n: int) -> None:
    while n > 0:
        chunk = src.read(min(n, 1 << 20))
        if not chunk:
            break
        dst.write(chunk)
        n -= len(chunk)


async def stream_from_thread(resp: web.StreamResponse,
                              produce: Callable[[io.RawIOBase], None]) -> None:
    """Run ``produce(writer)`` in a thread and send what it writes, with back-pressure (a few
    chunks in flight): archives of any size in constant memory."""
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=8)
    abort = threading.Event()

    class Writer(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b: Any) -> int:
            if abort.is_set():
                raise BrokenPipeError("client went away")
            data = bytes(b)
            if data:
                asyncio.run_coroutine_threadsafe(q.put(data), loop).result()
            return len(data)

    def run() -> None:
        try:
            produce(Writer())
        except BrokenPipeError:
            pass
        finally:
            asyncio.run_coroutine_threadsafe(q.put(None), loop).result()

    task = loop.run_in_executor(None, run)
    try:
        while (chunk := await q.get()) is not None:
            await resp.write(chunk)
    except BaseException:
        abort.set()
        while await q.get() is not None:
            pass
        raise
    finally:
        await task
