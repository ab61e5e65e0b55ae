"""Bundle files: deterministic zstd-compressed tar archives with a sha256 sidecar.

A bundle is ``NAME.tar.zst`` plus ``NAME.tar.zst.sha256`` (``sha256sum`` format, so
``sha256sum -c`` works too). Unpacking streams bytes through a hash, a zstd decompressor
and a tar reader at once, so the MPI receiver can unpack while later chunks still arrive.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import shutil
import tarfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import zstandard

SUFFIX = ".tar.zst"
CHUNK = 8 << 20  # read/broadcast unit: big enough for MPI bandwidth, small enough to pipeline


class BundleError(Exception):
    """A bundle is missing, corrupt, truncated or cannot be unpacked where asked."""


def sidecar_path(bundle: Path) -> Path:
    """Path of the checksum file that goes with ``bundle``."""
    return bundle.with_name(bundle.name + ".sha256")


def expected_digest(bundle: Path) -> str:
    """The sha256 recorded for ``bundle`` when it was built; BundleError if there is none."""
    side = sidecar_path(bundle)
    try:
        text = side.read_text().split()
    except FileNotFoundError:
        raise BundleError(f"{bundle}: no checksum file {side.name} (build bundles with `shoal bundle`)")
    if not text or len(text[0]) != 64:
        raise BundleError(f"{side}: not a sha256sum line")
    return text[0].lower()


def iter_file_chunks(path: Path, size: int = CHUNK) -> Iterator[bytes]:
    """Yield the bytes of ``path`` in chunks of ``size``."""
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk


class _HashingWriter(io.RawIOBase):
    """Write-through file that hashes what passes, so the archive digest costs no second read."""

    def __init__(self, raw: io.BufferedWriter) -> None:
        self.raw, self.hash = raw, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self.hash.update(b)
        return self.raw.write(b)


class BundleWriter:
    """Write one bundle atomically: a temp file renamed into place only when complete.

    Members are normalised (owner root, no user/group names) so the same inputs give the
    same archive; modification times are kept because ``.pyc`` validation depends on them.
    """

    def __init__(self, out: Path, level: int = 3, threads: int = 0) -> None:
        self.out = out
        self._tmp = out.with_name(f".{out.name}.{os.getpid()}.part")
        self._raw = open(self._tmp, "wb")
        self._hw = _HashingWriter(self._raw)
        cctx = zstandard.ZstdCompressor(level=level, threads=threads, write_checksum=True)
        self._z = cctx.stream_writer(self._hw, closefd=False)
        self._tar = tarfile.open(fileobj=self._z, mode="w|", format=tarfile.PAX_FORMAT)

    @staticmethod
    def _norm(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti

    def add_path(self, arcname: str, src: Path) -> None:
        """Add a file, directory (not recursive) or symlink from disk under ``arcname``."""
        ti = self._norm(self._tar.gettarinfo(str(src), arcname))
        if ti.isreg():
            with open(src, "rb") as f:
                self._tar.addfile(ti, f)
        elif ti.isdir() or ti.issym():
            self._tar.addfile(ti)
        # sockets, fifos, devices and hard links to them have no place in a Python environment

    def add_bytes(self, arcname: str, data: bytes, mode: int = 0o644, mtime: float = 0) -> None:
        """Add a regular file with the given contents."""
        ti = self._norm(tarfile.TarInfo(arcname))
        ti.size, ti.mode, ti.mtime = len(data), mode, int(mtime)
        self._tar.addfile(ti, io.BytesIO(data))

    def add_symlink(self, arcname: str, target: str) -> None:
        """Add a symbolic link ``arcname -> target``."""
        ti = self._norm(tarfile.TarInfo(arcname))
        ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, target, 0o777
        self._tar.addfile(ti)

    def close(self) -> str:
        """Finish the archive, move it into place, write the sidecar; return its sha256."""
        self._tar.close()
        self._z.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()
        digest = self._hw.hash.hexdigest()
        os.replace(self._tmp, self.out)
        side = sidecar_path(self.out)
        side.with_suffix(".tmp").write_text(f"{digest}  {self.out.name}\n")
        os.replace(side.with_suffix(".tmp"), side)
        return digest

    def abort(self) -> None:
        """Drop a half-written archive."""
        for f in (self._tar, self._z, self._raw):
            try:
                f.close()
            except Exception:  # already failing; the temp file is removed below anyway
                pass
        self._tmp.unlink(missing_ok=True)


class _QueueReader(io.RawIOBase):
    """Readable file over chunks put in a queue (None ends the stream)."""

    def __init__(self, q: queue.Queue) -> None:
        self._q, self._buf, self._eof = q, memoryview(b""), False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        while not self._buf and not self._eof:
            chunk = self._q.get()
            if chunk is None:
                self._eof = True
            else:
                self._buf = memoryview(chunk).cast("B")
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def drain(self) -> None:
        """Consume the rest of the stream so the producer never blocks on a dead consumer."""
        while not self._eof:
            if self._q.get() is None:
                self._eof = True


def _private_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's 'data' filter (no absolute paths, no escaping links, no devices), then
    owner-only permissions: node-local copies are private to the user, never world-writable."""
    m = tarfile.data_filter(member, dest)
    # a later bundle may put a file where an earlier one had a link or a directory (or the
    # reverse); remove the old entry so the write never follows a link (overlay semantics)
    target = os.path.join(dest, m.name)
    if os.path.islink(target):
        os.unlink(target)
    elif os.path.isdir(target) and not m.isdir():
        shutil.rmtree(target)
    elif m.isdir() and os.path.exists(target) and not os.path.isdir(target):
        os.unlink(target)
    mode = (m.mode or 0) & 0o700
    mode |= 0o700 if m.isdir() else 0o600
    return m.replace(mode=mode, uid=None, gid=None, uname=None, gname=None, deep=False)


class StreamUnpacker:
    """Unpack one bundle into ``into`` while its bytes are fed in (a thread decompresses and
    extracts). ``finish`` checks the sha256 and raises BundleError on any damage; the caller
    must then throw ``into`` away (it is a staging directory, never the live root).
    """

    def __init__(self, into: Path, name: str, queue_chunks: int = 8) -> None:
        self.into, self.name = into, name
        self._hash = hashlib.sha256()
        self._q: queue.Queue = queue.Queue(maxsize=queue_chunks)
        self._error: BaseException | None = None
        self.nbytes = 0
        self._thread = threading.Thread(target=self._run, name=f"unpack-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        reader = _QueueReader(self._q)
        try:
            dctx = zstandard.ZstdDecompressor()
            with dctx.stream_reader(reader, read_size=1 << 20, closefd=False) as z:
                with tarfile.open(fileobj=z, mode="r|") as tar:
                    tar.extractall(str(self.into), filter=_private_filter)
                while z.read(1 << 20):  # reach the frame end so zstd checks its own checksum
                    pass
        except BaseException as exc:  # reported by finish(); keep consuming so feed() never hangs
            self._error = exc
        finally:
            reader.drain()

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        """Hand the next bytes of the bundle to the unpacker (blocks when it is behind)."""
        self._hash.update(chunk)
        self.nbytes += len(chunk)
        self._q.put(chunk)

    def finish(self, expected_sha256: str) -> None:
        """End the stream, wait for extraction, and verify; BundleError names what went wrong."""
        self._q.put(None)
        self._thread.join()
        got = self._hash.hexdigest()
        if got != expected_sha256:
            raise BundleError(
                f"{self.name}: checksum mismatch (got {got[:16]}..., expected "
                f"{expected_sha256[:16]}...; {self.nbytes} bytes received): corrupt or truncated bundle"
            )
        if self._error is not None:
            raise BundleError(f"{self.name}: cannot unpack: {self._error}") from self._error


def unpack_stream(chunks: Iterable[bytes], into: Path, name: str, expected_sha256: str) -> int:
    """Unpack a bundle given as an iterable of byte chunks into ``into``; return its size."""
    u = StreamUnpacker(into, name)
    for c in chunks:
        u.feed(c)
    u.finish(expected_sha256)
    return u.nbytes
