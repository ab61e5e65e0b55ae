"""``shoal submit URL script.sh ARGS``: the client of ``shoal serve`` (standard library only).

Sends the script (and ``--input`` files), prints the job's log as it runs, downloads its
outputs into ``-o DIR`` (default: here) and exits with the script's exit status, so it reads
like running the script locally.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any


class SubmitError(Exception):
    """A one-line error of the client or of the service."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register the ``submit`` sub-command."""
    p = subparsers.add_parser(
        "submit",
        help="send a script to a `shoal serve` service and fetch its results",
        description="Run SCRIPT with ARGS on a `shoal serve` service next to its data: print "
                    "the job's log, download its outputs, exit with its status.",
    )
    p.add_argument("url", help="the service, e.g. http://data.example.org:8642/")
    p.add_argument("script", help="the shell script")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments ($1, $2, ...)")
    p.add_argument("--token", default=None,
                   help="the token (default: $SHOAL_TOKEN, or --token-file)")
    p.add_argument("--token-file", metavar="FILE", help="read the token from FILE")
    p.add_argument("--input", "-i", action="append", default=[], metavar="FILE",
                   help="upload FILE into the job's directory (by its base name); repeatable")
    p.add_argument("-o", "--output-dir", default=".", metavar="DIR",
                   help="where the job's outputs go (default: here)")
    p.add_argument("--no-download", action="store_true", help="leave the outputs on the server")
    p.add_argument("--detach", action="store_true",
                   help="print the job id and return at once (no log, no download)")
    p.add_argument("--delete", action="store_true",
                   help="delete the job on the server once its outputs are downloaded")
    p.add_argument("--quiet", "-q", action="store_true", help="do not print the job's log")
    p.set_defaults(func=main)


RATE_RETRIES = 5  # a request over the token's rate (429) is sent again this often


class RateLimited(SubmitError):
    """429: the token's request rate; ``wait``: seconds from Retry-After."""

    def __init__(self, message: str, wait: float) -> None:
        super().__init__(message)
        self.wait = wait


class Client:
    """A small client of the ``shoal serve`` API."""

    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise SubmitError(f"URL {url!r}: expected http://HOST:PORT/ or https://...")
        self.base = url.rstrip("/") + "/api/v1"
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None,
                timeout: float | None = None) -> Any:
        """One request; over the token's rate (429) it waits Retry-After and sends it again
        (a streamed body cannot be sent again: then :class:`RateLimited` is raised)."""
        for _ in range(RATE_RETRIES):
            try:
                return self._request(method, path, body, headers, timeout)
            except RateLimited as exc:
                if body is not None and not isinstance(body, bytes):
                    raise
                time.sleep(exc.wait)
        return self._request(method, path, body, headers, timeout)

    def _request(self, method: str, path: str, body: Any,
                 headers: dict[str, str] | None, timeout: float | None) -> Any:
        h = {"Authorization": f"Bearer {self.token}"}
        h.update(headers or {})
        req = urllib.request.Request(self.base + path, data=body, headers=h, method=method)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as exc:
            try:
                msg = json.loads(exc.read()).get("error")
            except (ValueError, AttributeError, OSError):
                msg = None
            text = f"{method} {path}: {exc.code} {msg or exc.reason}"
            if exc.code == 429 and (after := exc.headers.get("Retry-After", "")).isdigit():
                raise RateLimited(text, min(float(after), 60.0))
            raise SubmitError(text)
        except urllib.error.URLError as exc:
            raise SubmitError(f"cannot reach {self.base}: {exc.reason}")
        except (ConnectionError, OSError) as exc:
            raise SubmitError(f"{method} {path}: {exc}")

    def json(self, method: str, path: str, **kw: Any) -> Any:
        with self.request(method, path, **kw) as r:
            return json.loads(r.read())

    def submit(self, script: str, args: list[str], inputs: list[str]) -> dict[str, Any]:
        """Upload the script and inputs (streamed from disk); the new job's status."""
        info = self.json("GET", "/info")
        boundary = "shoal" + secrets.token_hex(12)
        parts: list[tuple[bytes, str | bytes]] = []  # (part header, file path or bytes)

        def head(name: str, filename: str | None, ctype: str) -> bytes:
            disp = f'form-data; name="{name}"'
            if filename is not None:
                disp += f'; filename="{filename}"'
            return (f"--{boundary}\r\nContent-Disposition: {disp}\r\n"
                    f"Content-Type: {ctype}\r\n\r\n").encode()

        parts.append((head("script", os.path.basename(script), "text/x-shellscript"), script))
        parts.append((head("args", None, "application/json"), json.dumps(args).encode()))
        names = set()
        for f in inputs:
            name = os.path.basename(f)
            if name in names:
                raise SubmitError(f"--input {f}: another input has the name {name!r}")
            names.add(name)
            parts.append((head("input", name, "application/octet-stream"), f))
        tail = f"--{boundary}--\r\n".encode()
        length = len(tail)
        for h, src in parts:
            length += len(h) + 2 + (len(src) if isinstance(src, bytes) else _size(src))
        if length > info["max_upload"]:
            raise SubmitError(f"the upload ({length} bytes) is over the service's limit of "
                              f"{info['max_upload']} bytes")

        def body() -> Iterator[bytes]:
            for h, src in parts:
                yield h
                if isinstance(src, bytes):
                    yield src
                else:
                    with open(src, "rb") as fh:
                        while chunk := fh.read(1 << 20):
                            yield chunk
                yield b"\r\n"
            yield tail

        for k in range(RATE_RETRIES + 1):
            try:
                return self.json("POST", "/jobs", body=body(), headers={
                    "Content-Type": f"multipart/form-data; boundary={boundary}",
                    "Content-Length": str(length)}, timeout=3600)
            except RateLimited as exc:  # over the token's rate: send it all again, later
                if k == RATE_RETRIES:
                    raise
                time.sleep(exc.wait)
        raise AssertionError("unreachable")

    def follow_log(self, job: str, out: Any) -> None:
        """Copy the job's log to ``out`` until the job ends."""
        with self.request("GET", f"/jobs/{job}/log?follow=1", timeout=None) as r:
            while chunk := r.read1(1 << 16):
                out.write(chunk.decode(errors="replace"))
                out.flush()

    def wait(self, job: str, poll: float = 0.5) -> dict[str, Any]:
        while True:
            st = self.json("GET", f"/jobs/{job}")
            if st["state"] in ("succeeded", "failed", "cancelled"):
                return st
            time.sleep(poll)

    def download(self, job: str, dest: str) -> list[str]:
        """Unpack the job's outputs (a tar stream) into ``dest``; their names."""
        os.makedirs(dest, exist_ok=True)
        names = []
        with self.request("GET", f"/jobs/{job}/archive?format=tar", timeout=3600) as r, \
                tarfile.open(fileobj=r, mode="r|") as tf:
            for m in tf:
                names.append(m.name)
                tf.extract(m, dest, filter="data")  # no links, no absolute or ../ paths
        return names


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError as exc:
        raise SubmitError(f"{path}: {exc.strerror}")


def _token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token)
    if args.token_file:
        try:
            with open(args.token_file) as f:
                return f.read().strip()
        except OSError as exc:
            raise SubmitError(f"--token-file {args.token_file}: {exc.strerror}")
    tok = os.environ.get("SHOAL_TOKEN")
    if not tok:
        raise SubmitError("no token: give --token, --token-file or set SHOAL_TOKEN")
    return tok


def main(args: argparse.Namespace) -> int:
    """Submit, follow, download; the exit status is the script's."""
    job = None
    client = None
    try:
        client = Client(args.url, _token(args))
        for f in [args.script, *args.input]:
            if not os.path.isfile(f):
                raise SubmitError(f"{f}: no such file")
        st = client.submit(args.script, list(args.args), args.input)
        job = st["id"]
        print(f"shoal submit: job {job}", file=sys.stderr)
        if args.detach:
            print(job)
            return 0
        if not args.quiet:
            client.follow_log(job, sys.stdout)
        st = client.wait(job)
        if st["state"] != "cancelled" and not args.no_download:
            names = client.download(job, args.output_dir)
            print(f"shoal submit: {len(names)} output entries in {args.output_dir}",
                  file=sys.stderr)
        if args.delete:
            client.json("DELETE", f"/jobs/{job}")
    except SubmitError as exc:
        print(f"shoal submit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if client is not None and job is not None:
            try:
                client.json("POST", f"/jobs/{job}/cancel")
                print(f"shoal submit: cancelled job {job}", file=sys.stderr)
            except SubmitError:
                pass
        return 130
    if st["state"] == "succeeded":
        return 0
    print(f"shoal submit: job {job} {st['state']}: {st.get('reason') or ''}".rstrip(": "),
          file=sys.stderr)
    rc = st.get("returncode")
    return rc if isinstance(rc, int) and 0 < rc < 256 else 1


__all__ = ["Client", "SubmitError"]
