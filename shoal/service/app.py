"""The HTTP API of ``shoal serve`` (aiohttp). See docs/serve.md for the endpoints.

Every ``/api/`` request carries ``Authorization: Bearer TOKEN``. A job belongs to the token
that submitted it; any other token gets 404 for it, as for a job that does not exist. Errors
are JSON objects ``{"error": "one line"}`` with the HTTP status that fits.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .archive import ARCHIVES, stream_from_thread, write_archive
from .files import BadPath, check_relpath, job_files, listing, open_under
from .jobs import FINISHED, JobManager, QuotaError, read_progress, valid_id
from .page import PAGE
from .store import Job
from .tokens import RateLimiter, Token, Tokens, format_size, format_time

API = "/api/v1"
MAX_SCRIPT = 4 << 20        # a script (or the JSON body that carries one)
MAX_FIELD = 1 << 20         # any other non-file field
MAX_PARTS = 1000
MAX_DRAIN = 4 << 20         # a refused body up to this size is read before a 429 answer
CHUNK = 1 << 16

TOKEN_KEY = web.AppKey("token", Token)
JOBS_KEY = web.AppKey("jobs", JobManager)
CONF_KEY = web.AppKey("conf", dict)
PAID_KEY = "shoal.rate_paid"  # request: one request spent of its token's rate already


def error(status: int, message: str, **headers: str) -> web.Response:
    """A one-line JSON error."""
    return web.json_response({"error": message}, status=status, headers=headers or None)


def _status_error(exc: web.HTTPException) -> web.Response:
    text = exc.text or exc.reason
    if exc.content_type == "application/json":
        return exc  # type: ignore[return-value]
    line = text.strip().splitlines()[0] if text.strip() else exc.reason
    line = re.sub(r"^\d{3}:\s*", "", line)
    resp = error(exc.status, line)
    for k in ("Allow", "WWW-Authenticate", "Retry-After"):
        if k in exc.headers:
            resp.headers[k] = exc.headers[k]
    return resp


@web.middleware
async def errors_and_auth(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
    """Token check for /api/ and JSON errors for everything (aiohttp's own 404/405 too)."""
    resp = await _guarded(request, handler)
    length = request.content_length  # (a body without a length is not read: it may be huge)
    if resp.status == 429 and not resp.prepared and length is not None and length <= MAX_DRAIN:
        # "try again later" of a small body: read it, so that a client that sends its whole
        # body before reading the answer (urllib, http.client) gets the 429, not a reset
        while await request.content.read(CHUNK):
            pass
    if resp.status >= 400 and not resp.prepared and not request.content.is_eof():
        # refused with body unread (too large, bad token, ...): answer, then close at once
        # instead of reading and discarding the rest of an upload
        resp.force_close()
        await resp.prepare(request)
        await resp.write_eof()
        request.protocol.force_close()
    return resp


async def _guarded(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
    try:
        if request.path.startswith("/api/"):
            tok = authenticate(request)
            if isinstance(tok, web.Response):
                return tok
            request[TOKEN_KEY] = tok
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _status_error(exc)
    except BadPath as exc:
        return error(400, str(exc))
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as exc:  # a bug must not take the service down; say what failed
        request.app.logger.exception("internal error on %s %s", request.method, request.path)
        return error(500, f"internal error: {type(exc).__name__}: {exc}".splitlines()[0])


def authenticate(request: web.Request) -> Token | web.Response:
    tokens: Tokens = request.app[CONF_KEY]["tokens"]
    header = request.headers.get("Authorization", "")
    if not header:
        return error(401, "missing token: send the header 'Authorization: Bearer TOKEN'",
                     **{"WWW-Authenticate": 'Bearer realm="shoal"'})
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return error(401, "malformed Authorization header: expected 'Bearer TOKEN'",
                     **{"WWW-Authenticate": 'Bearer realm="shoal"'})
    tok = tokens.check(value.strip())
    if tok is None:
        return error(401, "unknown token", **{"WWW-Authenticate": 'Bearer error="invalid_token"'})
    if tok.expired():
        assert tok.expires is not None
        return error(401, f"token '{tok.name}' expired at {format_time(tok.expires)}: ask the "
                          "service's operator for a new one",
                     **{"WWW-Authenticate": 'Bearer error="invalid_token", '
                                            'error_description="expired"'})
    return rate_limited(request, tok) or tok


def rate_limited(request: web.Request, tok: Token) -> web.Response | None:
    """429 with ``Retry-After`` when the token's bucket is empty (one request is spent
    otherwise)."""
    if request.get(PAID_KEY):  # its `Expect: 100-continue` was counted already
        return None
    wait = request.app[CONF_KEY]["limiter"].take(tok)
    if not wait:
        request[PAID_KEY] = True
        return None
    return error(429, f"rate limit: token '{tok.name}' may make {tok.rate:g} requests a second "
                      f"(burst {tok.burst}); retry in {wait:.2f} s",
                 **{"Retry-After": str(max(1, math.ceil(wait)))})


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: refuse a bad token or a too large body before the client sends
    it (curl asks so for large uploads)."""
    if request.version != (1, 1) or request.headers.get("Expect", "").lower() != "100-continue":
        return error(417, "unknown Expect header")
    tok = authenticate(request)
    if isinstance(tok, web.Response):
        tok.force_close()
        return tok
    too_big = _too_big(request)
    if too_big is not None:
        too_big.force_close()
        return too_big
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[union-attr]
    request.writer.output_size = 0  # type: ignore[union-attr]
    return None


def _too_big(request: web.Request) -> web.Response | None:
    limit = request.app[CONF_KEY]["max_upload"]
    if request.content_length is not None and request.content_length > limit:
        return error(413, f"upload of {format_size(request.content_length)} is over the limit "
                          f"of {format_size(limit)} (--max-upload)")
    return None


def _job_or_404(request: web.Request) -> Job:
    job_id = request.match_info["job"]
    job = None
    if valid_id(job_id):
        job = request.app[JOBS_KEY].store.get(job_id, owner=request[TOKEN_KEY].name)
    if job is None:
        raise web.HTTPNotFound(text=f"no job {job_id!r}")
    return job


def _job_json(request: web.Request, job: Job) -> dict[str, Any]:
    jm = request.app[JOBS_KEY]
    d = job.public()
    d["progress"] = read_progress(jm.log_path(job.id))
    try:
        d["log_bytes"] = jm.log_path(job.id).stat().st_size
    except OSError:
        d["log_bytes"] = 0
    base = f"{API}/jobs/{job.id}"
    d["urls"] = {"self": base, "log": f"{base}/log", "outputs": f"{base}/outputs",
                 "archive": f"{base}/archive", "cancel": f"{base}/cancel"}
    return d


# -- handlers -------------------------------------------------------------------------------

async def page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html", charset="utf-8",
                        headers={"Content-Security-Policy":
                                 "default-src 'self'; style-src 'unsafe-inline'; "
                                 "script-src 'unsafe-inline'; img-src 'self' data:",
                                 "X-Content-Type-Options": "nosniff",
                                 "Referrer-Policy": "no-referrer"})


async def info(request: web.Request) -> web.Response:
    conf = request.app[CONF_KEY]
    tok = request[TOKEN_KEY]
    store = request.app[JOBS_KEY].store
    lim = conf["limits"]
    return web.json_response({
        "service": "shoal serve", "token": tok.name, "data_root": conf["data_root"],
        "max_upload": conf["max_upload"],
        "limits": {k: getattr(lim, k) for k in ("cpu_s", "memory_bytes", "nprocs", "wall_s",
                                                 "output_bytes", "workers")},
        "quota": {"max_jobs": tok.max_jobs, "active_jobs": store.count_active(tok.name),
                  "max_output": tok.max_output, "output_bytes": store.output_total(tok.name),
                  "rate": tok.rate, "burst": tok.burst if tok.rate else None,
                  "expires": format_time(tok.expires) if tok.expires else None},
    })


async def data_list(request: web.Request) -> web.Response:
    conf = request.app[CONF_KEY]
    root: Path = conf["data_dir"]
    sub = request.query.get("path", "")
    base = root
    if sub:
        check_relpath(sub)
        base = root / sub
        if base.is_symlink() or not base.is_dir():
            raise web.HTTPNotFound(text=f"no directory {sub!r} in the data directory")
    entries, truncated = await asyncio.get_running_loop().run_in_executor(None, listing, base)
    prefix = f"{sub}/" if sub else ""
    for e in entries:
        e["name"] = prefix + str(e["name"])
        e["path"] = f"{conf['data_root'].rstrip('/')}/{e['name']}"
    return web.json_response({"root": conf["data_root"], "entries": entries,
                              "truncated": truncated})


async def data_file(request: web.Request) -> web.StreamResponse:
    return await _send_file(request, request.app[CONF_KEY]["data_dir"],
                            request.match_info["path"])


async def _send_file(request: web.Request, root: Path, rel: str) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    try:
        fd, st = await loop.run_in_executor(None, open_under, root, rel)
    except FileNotFoundError:
        raise web.HTTPNotFound(text=f"no file {rel!r}")
    with open(fd, "rb") as f:
        resp = web.StreamResponse(headers={
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'attachment; filename="{os.path.basename(rel)}"'})
        resp.content_length = st.st_size
        await resp.prepare(request)
        left = st.st_size  # what the header promised, even if a running job changes the file
        while left > 0:
            chunk = await loop.run_in_executor(None, f.read, min(CHUNK * 4, left))
            if not chunk:
                break
            await resp.write(chunk)
            left -= len(chunk)
        if left:  # the file shrank under us: end the connection rather than send a bad length
            resp.force_close()
        await resp.write_eof()
    return resp


async def _read_field(part: Any, limit: int, what: str) -> bytes:
    buf = bytearray()
    while True:
        chunk = await part.read_chunk(CHUNK)
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > limit:
            raise _Refused(413, f"field '{what}' is over {format_size(limit)}")


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_SCRIPT_NAME = re.compile(r"[^A-Za-z0-9._-]")


def _script_name(name: str | None) -> str:
    base = os.path.basename(name or "") or "job.sh"
    return _SCRIPT_NAME.sub("_", base)[:100] or "job.sh"


def _parse_args(raw: str) -> list[str]:
    try:
        args = json.loads(raw)
    except ValueError as exc:
        raise _Refused(400, f"field 'args': not JSON ({exc.msg} at column {exc.colno})")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _Refused(400, "field 'args': expected a JSON list of strings")
    return args


async def submit(request: web.Request) -> web.Response:
    too_big = _too_big(request)
    if too_big is not None:
        return too_big
    jm = request.app[JOBS_KEY]
    tok = request[TOKEN_KEY]
    ctype = request.content_type
    if ctype not in ("multipart/form-data", "application/json"):
        return error(415, f"content type {ctype!r}: send multipart/form-data (fields script, "
                          "arg or args, input) or application/json")
    try:
        job_id = jm.reserve(tok)
    except QuotaError as exc:
        return error(exc.status, str(exc))
    try:
        if ctype == "application/json":
            name, script, args, inputs = await _from_json(request)
        else:
            name, script, args, inputs = await _from_multipart(request, jm.work_dir(job_id))
        job = jm.submit(job_id, tok, name, script, args, inputs)
    except _Refused as exc:
        jm.discard(job_id)
        return error(exc.status, str(exc))
    except BaseException:
        jm.discard(job_id)
        raise
    return web.json_response(_job_json(request, job), status=201,
                             headers={"Location": f"{API}/jobs/{job.id}"})


async def _from_json(request: web.Request) -> tuple[str, bytes, list[str], list[str]]:
    if request.content_length is None or request.content_length > MAX_SCRIPT:
        raise _Refused(413 if request.content_length else 411,
                       f"a JSON submission needs a Content-Length of at most "
                       f"{format_size(MAX_SCRIPT)}; send inputs as multipart/form-data")
    try:
        body = json.loads(await request.read())
    except ValueError as exc:
        raise _Refused(400, f"body is not JSON: {exc}".splitlines()[0])
    if not isinstance(body, dict):
        raise _Refused(400, "body: expected a JSON object {\"script\": ..., \"args\": [...]}")
    unknown = set(body) - {"script", "args", "name"}
    if unknown:
        raise _Refused(400, f"unknown field {sorted(unknown)[0]!r} (script, args, name)")
    script = body.get("script")
    if not isinstance(script, str) or not script.strip():
        raise _Refused(400, "field 'script': the script's text is required")
    args = _parse_args(json.dumps(body.get("args", [])))
    return _script_name(body.get("name")), script.encode(), args, []


async def _from_multipart(request: web.Request,
                          work: Path) -> tuple[str, bytes, list[str], list[str]]:
    limit = request.app[CONF_KEY]["max_upload"]
    try:
        reader = await request.multipart()
    except (AssertionError, ValueError) as exc:
        raise _Refused(400, f"malformed multipart body: {exc}".splitlines()[0])
    script: bytes | None = None
    name = "job.sh"
    args: list[str] | None = None
    arg_fields: list[str] = []
    inputs: list[str] = []
    total = 0
    nparts = 0
    loop = asyncio.get_running_loop()
    try:
        while True:
            part = await reader.next()
            if part is None:
                break
            nparts += 1
            if nparts > MAX_PARTS:
                raise _Refused(400, f"more than {MAX_PARTS} parts")
            if not hasattr(part, "read_chunk") or part.name is None:
                raise _Refused(400, "malformed multipart body: a part without a name")
            field = part.name
            if field == "script":
                if script is not None:
                    raise _Refused(400, "field 'script' given twice")
                script = await _read_field(part, MAX_SCRIPT, "script")
                total += len(script)
                if part.filename:
                    name = _script_name(part.filename)
            elif field == "args":
                args = _parse_args((await _read_field(part, MAX_FIELD, "args")).decode())
            elif field == "arg":
                arg_fields.append((await _read_field(part, MAX_FIELD, "arg")).decode())
            elif field == "input":
                rel = part.filename or ""
                try:
                    parts = check_relpath(rel, "input file name")
                except BadPath as exc:
                    raise _Refused(400, str(exc))
                if rel in inputs:
                    raise _Refused(400, f"input {rel!r} given twice")
                dest = work.joinpath(*parts)
                inputs.append(rel)
                try:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    f = open(dest, "xb")  # noqa: SIM115 - closed below
                except OSError as exc:  # 'a' after 'a/b', or the reverse
                    raise _Refused(400, f"input {rel!r}: {exc.strerror}")
                with f:
                    while True:
                        chunk = await part.read_chunk(CHUNK * 4)
                        if not chunk:
                            break
                        total += len(chunk)
                        if total > limit:
                            raise _Refused(413, f"upload is over the limit of "
                                                f"{format_size(limit)} (--max-upload)")
                        await loop.run_in_executor(None, f.write, chunk)
            else:
                raise _Refused(400, f"unknown field {field!r} (script, arg, args, input)")
    except (ValueError, AssertionError, HttpProcessingError) as exc:  # the reader's complaints
        what = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        raise _Refused(400, f"malformed multipart body: {what}".splitlines()[0])
    if script is None or not script.strip():
        raise _Refused(400, "field 'script' is required (the script's text or file)")
    if args is not None and arg_fields:
        raise _Refused(400, "give either 'args' (a JSON list) or 'arg' fields, not both")
    return name, script, args if args is not None else arg_fields, inputs


async def jobs_list(request: web.Request) -> web.Response:
    jm = request.app[JOBS_KEY]
    jobs = jm.store.list(owner=request[TOKEN_KEY].name)
    return web.json_response({"jobs": [_job_json(request, j) for j in jobs]})


async def job_status(request: web.Request) -> web.Response:
    return web.json_response(_job_json(request, _job_or_404(request)))


async def job_cancel(request: web.Request) -> web.Response:
    job = _job_or_404(request)
    job = request.app[JOBS_KEY].cancel(job)
    return web.json_response(_job_json(request, job), status=202)


async def job_delete(request: web.Request) -> web.Response:
    job = _job_or_404(request)
    jm = request.app[JOBS_KEY]
    ok = await asyncio.get_running_loop().run_in_executor(None, jm.delete, job)
    if not ok:
        return error(409, f"job {job.id} did not stop in time; try again")
    return web.json_response({"id": job.id, "deleted": True})


async def job_log(request: web.Request) -> web.StreamResponse:
    job = _job_or_404(request)
    jm = request.app[JOBS_KEY]
    try:
        offset = int(request.query.get("offset", "0"))
        if offset < 0:
            raise ValueError
    except ValueError:
        return error(400, f"offset {request.query.get('offset')!r}: expected a whole number >= 0")
    follow = request.query.get("follow", "") in ("1", "true", "yes")
    path = jm.log_path(job.id)
    loop = asyncio.get_running_loop()

    def read_from(off: int) -> bytes:
        try:
            with open(path, "rb") as f:
                f.seek(off)
                return f.read(1 << 20)
        except OSError:
            return b""

    if not follow:
        data = await loop.run_in_executor(None, read_from, offset)
        return web.Response(body=data, content_type="text/plain", charset="utf-8",
                            headers={"X-Log-Offset": str(offset + len(data))})
    resp = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    while True:
        data = await loop.run_in_executor(None, read_from, offset)
        if data:
            await resp.write(data)
            offset += len(data)
            continue
        cur = jm.store.get(job.id)
        if cur is None or cur.state in FINISHED:
            data = await loop.run_in_executor(None, read_from, offset)
            if data:  # written between the read and the state check
                await resp.write(data)
                continue
            break
        await asyncio.sleep(0.2)
    await resp.write_eof()
    return resp


async def job_outputs(request: web.Request) -> web.Response:
    job = _job_or_404(request)
    work = request.app[JOBS_KEY].work_dir(job.id)
    entries, truncated = await asyncio.get_running_loop().run_in_executor(None, job_files, work)
    files = [{"name": e["name"], "size": e["size"], "mtime": e["mtime"],
              "url": f"{API}/jobs/{job.id}/outputs/{e['name']}"}
             for e in entries if e["type"] == "file"]
    return web.json_response({"id": job.id, "state": job.state, "files": files,
                              "truncated": truncated})


async def job_output_file(request: web.Request) -> web.StreamResponse:
    job = _job_or_404(request)
    return await _send_file(request, request.app[JOBS_KEY].work_dir(job.id),
                            request.match_info["path"])


async def job_archive(request: web.Request) -> web.StreamResponse:
    job = _job_or_404(request)
    fmt = request.query.get("format", "tar")
    if fmt not in ARCHIVES:
        return error(400, f"format {fmt!r}: one of tar, tgz, zip")
    if job.state not in FINISHED:
        return error(409, f"job {job.id} is {job.state}: archives are made of finished jobs "
                          "(single files can be fetched now)")
    work = request.app[JOBS_KEY].work_dir(job.id)
    ctype, ext = ARCHIVES[fmt]
    resp = web.StreamResponse(headers={
        "Content-Type": ctype,
        "Content-Disposition": f'attachment; filename="job-{job.id}.{ext}"'})
    await resp.prepare(request)
    await stream_from_thread(resp, lambda out: write_archive(out, work, fmt))
    await resp.write_eof()
    return resp


# -- the application ------------------------------------------------------------------------

def create_app(*, data_dir: Path, jobs_dir: Path, tokens: Tokens, limits: Any,
               run_job: Callable[..., Any], max_upload: int = 256 << 20, max_running: int = 2,
               data_root: str = "/data", resume: bool = False) -> web.Application:
    """The service: ``run_job`` runs one job (``shoal.service.sandbox.run_job``); scripts see
    the data directory at ``data_root``; ``resume``: jobs cut off by a restart go on."""
    app = web.Application(middlewares=[errors_and_auth], client_max_size=MAX_SCRIPT)
    jm = JobManager(jobs_dir, data_dir, limits, run_job, max_running=max_running, resume=resume)
    jm.output_quota.update({t.name: t.max_output for t in tokens.tokens})
    app[JOBS_KEY] = jm
    app[CONF_KEY] = {"tokens": tokens, "data_dir": data_dir, "max_upload": max_upload,
                     "limits": limits, "data_root": data_root, "limiter": RateLimiter()}
    r = app.router
    r.add_get("/", page)
    r.add_get(f"{API}/info", info)
    r.add_get(f"{API}/data", data_list)
    r.add_get(f"{API}/data/{{path:.+}}", data_file)
    r.add_post(f"{API}/jobs", submit, expect_handler=expect_continue)
    r.add_get(f"{API}/jobs", jobs_list)
    r.add_get(f"{API}/jobs/{{job}}", job_status)
    r.add_delete(f"{API}/jobs/{{job}}", job_delete)
    r.add_post(f"{API}/jobs/{{job}}/cancel", job_cancel)
    r.add_get(f"{API}/jobs/{{job}}/log", job_log)
    r.add_get(f"{API}/jobs/{{job}}/outputs", job_outputs)
    r.add_get(f"{API}/jobs/{{job}}/outputs/{{path:.+}}", job_output_file)
    r.add_get(f"{API}/jobs/{{job}}/archive", job_archive)

    async def on_cleanup(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, jm.shutdown)

    app.on_cleanup.append(on_cleanup)
    return app
