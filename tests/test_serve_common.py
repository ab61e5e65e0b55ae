"""Helpers of the `shoal serve` tests: a real `shoal serve` process on loopback, its tokens,
and a small HTTP client (http.client). No tests here."""

from __future__ import annotations

import functools
import http.client
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.script.script_helpers import REPO

needs_aiohttp = pytest.mark.skipif(
    __import__("importlib").util.find_spec("aiohttp") is None,
    reason="aiohttp not installed (pip install -e '.[serve]')")

SERVE_CMD = [sys.executable, "-m", "shoal", "serve"]


@functools.lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    """Why the job sandbox cannot run here (not root, no bubblewrap, ...), or None."""
    try:
        from shoal.service import sandbox
    except ImportError as exc:  # pragma: no cover
        return str(exc)
    problems = sandbox.check()
    return problems[0] if problems else None


# `shoal serve` refuses to start without a working sandbox: tests of a running service need it
# (checked once per session: it starts one sandbox)
needs_sandbox = pytest.mark.skipif(sandbox_problem() is not None,
                                   reason=f"the job sandbox cannot run here: {sandbox_problem()}"
                                          " (scripts/setup.sh)")


class Server:
    """One `shoal serve` process (its own session, so a kill takes its jobs too)."""

    def __init__(self, tmp: Path, data: Path, users: dict[str, dict[str, Any]] | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.tmp, self.data, self.extra = tmp, data, extra
        self.jobs = tmp / "jobs"
        self.tokens: dict[str, str] = {}
        lines = []
        for name, conf in (users or {"alice": {}}).items():
            tok = secrets.token_hex(20)
            self.tokens[name] = tok
            lines.append(f"[tokens.{name}]\ntoken = \"{tok}\"")
            lines += [f"{k} = {json.dumps(v)}" for k, v in conf.items()]
        self.tokens_file = tmp / "tokens.toml"
        self.tokens_file.write_text("\n".join(lines) + "\n")
        os.chmod(self.tokens_file, 0o600)
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.port = 0

    def start(self, timeout: float = 30) -> Server:
        self.err = open(self.tmp / "serve.err", "a")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*SERVE_CMD, "--data", str(self.data), "--jobs", str(self.jobs), "--tokens",
             str(self.tokens_file), "--listen", f"127.0.0.1:{self.port}", *self.extra],
            stdout=subprocess.PIPE, stderr=self.err, text=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line or time.monotonic() > deadline:
            self.stop()
            raise AssertionError(f"shoal serve did not start: {line!r} "
                                 f"{(self.tmp / 'serve.err').read_text()[-2000:]}")
        self.url = line.split("listening on ", 1)[1].strip().rstrip("/")
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int | None:
        """Stop the service (``SIGKILL``: the whole session, jobs included, as a crash)."""
        p, self.proc = self.proc, None
        if p is None:
            return None
        try:
            if sig == signal.SIGKILL:
                os.killpg(p.pid, signal.SIGKILL)
            else:
                p.send_signal(sig)
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            rc = p.wait()
        except ProcessLookupError:
            rc = p.wait()
        if p.stdout:
            p.stdout.close()
        self.err.close()
        # nothing of the session may outlive the service (jobs, sandboxes)
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            pass
        else:
            time.sleep(1)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return rc

    # -- HTTP ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, token: str | None = "alice", body: Any = None,
                headers: dict[str, str] | None = None,
                timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
        """One request; ``token`` is a user name of this server, or a literal token if it is
        not one, or None for no Authorization header."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {self.tokens.get(token, token)}"
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, expect: int = 200, **kw: Any) -> Any:
        status, _, body = self.request(method, path, **kw)
        assert status == expect, (status, body)
        return json.loads(body)

    def submit(self, script: str, args: list[str] | None = None, token: str = "alice",
               inputs: dict[str, bytes] | None = None, expect: int = 201) -> Any:
        fields: list[tuple[str, str | None, bytes]] = [("script", "job.sh", script.encode()),
                                                       ("args", None,
                                                        json.dumps(args or []).encode())]
        for name, data in (inputs or {}).items():
            fields.append(("input", name, data))
        body, ctype = multipart(fields)
        return self.json("POST", "/api/v1/jobs", expect=expect, token=token, body=body,
                         headers={"Content-Type": ctype})

    def wait(self, job: str, token: str = "alice", timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            st = self.json("GET", f"/api/v1/jobs/{job}", token=token)
            if st["state"] in ("succeeded", "failed", "cancelled"):
                return st
            assert time.monotonic() < deadline, f"job {job} still {st['state']}"
            time.sleep(0.2)


def multipart(fields: list[tuple[str, str | None, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body of (name, filename or None, data)."""
    boundary = "b" + secrets.token_hex(8)
    out = bytearray()
    for name, filename, data in fields:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


@pytest.fixture
def serve(tmp_path: Path):
    """``serve(users=..., extra=...)`` starts a service on a fresh data directory
    (``tmp_path/data``); every one started is stopped at the end."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    started: list[Server] = []

    def start(users: dict[str, dict[str, Any]] | None = None,
              extra: tuple[str, ...] = ()) -> Server:
        d = tmp_path / f"srv{len(started)}"
        d.mkdir()
        s = Server(d, data, users, extra).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
    # job directories may hold files of the sandbox's user: remove them as the service would
    shutil.rmtree(tmp_path, ignore_errors=True)
