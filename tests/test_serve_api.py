# ruff: noqa: F811  (the `serve` fixture is imported, then named as a parameter)
"""`shoal serve` through real HTTP: an NCO job gives bash's files, bad requests get one-line
JSON errors, several tokens at once, quotas, cancel/delete, restart of the service."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

from tests.script.script_helpers import REPO, needs_nco, run_bash, snapshot, write_model
from tests.test_serve_common import (  # noqa: F401
    Server,
    multipart,
    needs_aiohttp,
    needs_sandbox,
    serve,
)

pytestmark = [needs_aiohttp, needs_sandbox, pytest.mark.timeout(240)]

# $1: the data directory (the service's, as its listing names it, or the local copy)
NCO_SCRIPT = """#!/bin/bash
set -e
DATA=$1
for f in $DATA/sresalb_*.nc; do
  m=$(basename $f .nc)
  ncra -O $f avg_$m.nc                      # time mean
  ncwa -O -a lat,lon $f glb_$m.nc           # spatial mean series
done
ncra -O local_model.nc avg_local.nc         # the uploaded input
nces -O avg_sresalb_*.nc ens_avg.nc         # ensemble mean
ncks -O -v tas ens_avg.nc result.nc
ncbo -O --op_typ=sub avg_local.nc ens_avg.nc anomaly.nc
mkdir -p series
mv glb_*.nc series/
rm avg_local.nc
echo "models: $(ls $DATA | wc -l)"
"""


def _one_line_error(body: bytes) -> str:
    err = json.loads(body)["error"]
    assert isinstance(err, str) and err and "\n" not in err
    return err


@needs_nco
def test_nco_job_gives_bash_files(serve, tmp_path: Path) -> None:
    srv = serve()
    for k in range(3):
        write_model(srv.data / f"sresalb_m{k}.nc", k)
    local_in = tmp_path / "local_model.nc"
    write_model(local_in, 7)
    listing = srv.json("GET", "/api/v1/data")
    names = {e["name"]: e for e in listing["entries"]}
    assert set(names) == {f"sresalb_m{k}.nc" for k in range(3)}
    assert names["sresalb_m0.nc"]["path"] == f"{listing['root']}/sresalb_m0.nc"
    # the reference: bash on local copies of the inputs
    ref = tmp_path / "ref"
    (ref / "data").mkdir(parents=True)
    for k in range(3):
        (ref / "data" / f"sresalb_m{k}.nc").write_bytes(
            (srv.data / f"sresalb_m{k}.nc").read_bytes())
    (ref / "local_model.nc").write_bytes(local_in.read_bytes())
    (ref / "job.sh").write_text(NCO_SCRIPT)
    b = run_bash(ref, "job.sh", str(ref / "data"))
    assert b.returncode == 0, b.stderr
    (ref / "job.sh").unlink()
    shutil_rm(ref / "data")
    expected = snapshot(ref)
    assert "result.nc" in expected and "series/glb_sresalb_m2.nc" in expected

    # the service, through the API: job, status, log, outputs, one file, zip and tar
    st = srv.submit(NCO_SCRIPT, [listing["root"]], inputs={"local_model.nc":
                                                            local_in.read_bytes()})
    assert st["state"] in ("queued", "running") and st["inputs"] == ["local_model.nc"]
    st = srv.wait(st["id"])
    status, _, log = srv.request("GET", f"/api/v1/jobs/{st['id']}/log")
    assert st["state"] == "succeeded" and st["returncode"] == 0, (st, log)
    assert b"models: 3" in log
    assert st["progress"]["done"] == st["progress"]["total"] > 10, st["progress"]
    outs = srv.json("GET", f"/api/v1/jobs/{st['id']}/outputs")
    assert {f["name"] for f in outs["files"]} == {k for k in expected if not k.endswith("/")}
    status, hdrs, data = srv.request("GET", f"/api/v1/jobs/{st['id']}/outputs/result.nc")
    assert status == 200 and int(hdrs["content-length"]) == len(data)
    got = tmp_path / "got_zip"
    status, _, data = srv.request("GET", f"/api/v1/jobs/{st['id']}/archive?format=zip")
    assert status == 200
    zipfile.ZipFile(io.BytesIO(data)).extractall(got)
    assert snapshot(got) == {k: v for k, v in expected.items()}
    status, _, data = srv.request("GET", f"/api/v1/jobs/{st['id']}/archive?format=tgz")
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(tmp_path / "got_tgz", filter="data")
    assert snapshot(tmp_path / "got_tgz") == expected

    # the same through the client: `shoal submit URL script ARGS --input F -o DIR`
    (tmp_path / "job.sh").write_text(NCO_SCRIPT)
    out = tmp_path / "got_cli"
    r = subprocess.run([sys.executable, "-m", "shoal", "submit", f"--token={srv.tokens['alice']}",
                        "--input", str(local_in), "-o", str(out), srv.url,
                        str(tmp_path / "job.sh"), listing["root"]],
                       capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "models: 3" in r.stdout
    assert snapshot(out) == expected


def shutil_rm(p: Path) -> None:
    import shutil

    shutil.rmtree(p)


def test_bad_requests_get_one_line_errors(serve) -> None:
    srv = serve(users={"alice": {}, "bob": {}})
    # tokens
    for token, why in ((None, "missing token"), ("not-a-token-at-all", "unknown token")):
        status, hdrs, body = srv.request("GET", "/api/v1/jobs", token=token)
        assert status == 401 and why in _one_line_error(body)
        assert hdrs["content-type"].startswith("application/json")
        assert "www-authenticate" in hdrs
    status, _, body = srv.request("GET", "/api/v1/jobs", token=None,
                                  headers={"Authorization": "Basic YTpi"})
    assert status == 401 and "Bearer" in _one_line_error(body)
    # submissions
    cases = [
        ({"script": ""}, 400, "script"),
        ({"script": "echo hi", "args": "x"}, 400, "list of strings"),
        ({"script": "echo hi", "color": 1}, 400, "unknown field 'color'"),
    ]
    for body, code, text in cases:
        status, _, resp = srv.request("POST", "/api/v1/jobs", body=body)
        assert status == code and text in _one_line_error(resp), (body, resp)
    status, _, resp = srv.request("POST", "/api/v1/jobs", body=b"{not json",
                                  headers={"Content-Type": "application/json"})
    assert status == 400 and "not JSON" in _one_line_error(resp)
    status, _, resp = srv.request("POST", "/api/v1/jobs", body=b"echo hi",
                                  headers={"Content-Type": "text/plain"})
    assert status == 415 and "multipart/form-data" in _one_line_error(resp)
    mp, ctype = multipart([("args", None, b"[]")])
    status, _, resp = srv.request("POST", "/api/v1/jobs", body=mp,
                                  headers={"Content-Type": ctype})
    assert status == 400 and "'script' is required" in _one_line_error(resp)
    for name in ("../evil.nc", "a/../../b", "a//b", ".."):
        mp, ctype = multipart([("script", "j.sh", b"echo hi"), ("input", name, b"x")])
        status, _, resp = srv.request("POST", "/api/v1/jobs", body=mp,
                                      headers={"Content-Type": ctype})
        assert status == 400 and "input file name" in _one_line_error(resp), name
    mp, ctype = multipart([("script", "j.sh", b"echo hi"), ("input", "a/b.nc", b"x"),
                           ("input", "a", b"y")])
    status, _, resp = srv.request("POST", "/api/v1/jobs", body=mp,
                                  headers={"Content-Type": ctype})
    assert status == 400 and "input 'a'" in _one_line_error(resp)
    status, _, resp = srv.request("POST", "/api/v1/jobs", body=b"--x\r\ngarbage",
                                  headers={"Content-Type": "multipart/form-data; boundary=x"})
    assert status == 400, resp
    _one_line_error(resp)
    # a JSON submission works too
    js = srv.json("POST", "/api/v1/jobs", expect=201, body={"script": "echo \"$1\"",
                                                            "args": ["from json"]})
    assert srv.wait(js["id"])["state"] == "succeeded"
    assert b"from json\n" in srv.request("GET", f"/api/v1/jobs/{js['id']}/log")[2]
    assert srv.json("DELETE", f"/api/v1/jobs/{js['id']}")["deleted"]
    # jobs that do not exist, or belong to another token, are the same 404
    job = srv.submit("echo hello\n")["id"]
    srv.wait(job)
    for path in (f"/api/v1/jobs/{job}", f"/api/v1/jobs/{job}/log",
                 f"/api/v1/jobs/{job}/outputs", f"/api/v1/jobs/{job}/archive",
                 "/api/v1/jobs/0123456789abcdef", "/api/v1/jobs/..%2F..%2Fetc"):
        status, _, resp = srv.request("GET", path, token="bob")
        assert status == 404, (path, resp)
        _one_line_error(resp)
    for method, path in (("POST", f"/api/v1/jobs/{job}/cancel"), ("DELETE", f"/api/v1/jobs/{job}")):
        assert srv.request(method, path, token="bob")[0] == 404
    assert srv.json("GET", "/api/v1/jobs", token="bob")["jobs"] == []
    assert [j["id"] for j in srv.json("GET", "/api/v1/jobs")["jobs"]] == [job]
    # paths out of a job or the data directory
    for path in (f"/api/v1/jobs/{job}/outputs/../../jobs.sqlite",
                 f"/api/v1/jobs/{job}/outputs/%2E%2E/script.sh", "/api/v1/data/../tokens.toml",
                 "/api/v1/data?path=..", f"/api/v1/jobs/{job}/archive?format=rar"):
        status, _, resp = srv.request("GET", path)
        assert status in (400, 404), (path, status, resp)
        _one_line_error(resp)
    status, hdrs, resp = srv.request("PUT", "/api/v1/jobs")
    assert status == 405 and "allow" in hdrs
    _one_line_error(resp)
    assert srv.request("GET", f"/api/v1/jobs/{job}/log?offset=-3")[0] == 400
    # raw garbage on the socket: an HTTP 400, and the service goes on
    import socket

    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"HELLO THERE\r\n\r\n")
        assert s.recv(100).split(b" ")[1] == b"400"
    assert srv.json("GET", f"/api/v1/jobs/{job}")["state"] == "succeeded"


def test_big_upload_is_refused_early(serve) -> None:
    """A 1 GB upload against --max-upload 8M: with Content-Length it is refused before any of
    the body is read; streamed (chunked) it is cut off near the limit, and nothing is kept."""
    import socket

    srv = serve(extra=("--max-upload", "8M"))
    tok = srv.tokens["alice"]
    head = (f"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n"
            "Content-Type: multipart/form-data; boundary=zz\r\n")
    # declared 1 GB, with Expect: 100-continue (curl's way): 413 instead of 100 Continue
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall((head + f"Content-Length: {1 << 30}\r\nExpect: 100-continue\r\n\r\n").encode())
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413"), reply
    assert b"over the limit of 8.0 MiB" in reply
    # declared 1 GB, body sent at once: answered before it is read
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall((head + f"Content-Length: {1 << 30}\r\n\r\n").encode() + b"\0" * 65536)
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413"), reply
    # streamed without a length: the service stops reading near the limit
    sent = 0
    answered = threading.Event()
    reply_box: list[bytes] = []
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)

    def read() -> None:
        try:
            reply_box.append(s.recv(4096))
        finally:
            answered.set()

    reader = threading.Thread(target=read)
    reader.start()
    s.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
    part = (b'--zz\r\nContent-Disposition: form-data; name="input"; filename="big.bin"\r\n\r\n')
    s.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
    chunk = b"\0" * (1 << 20)
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    try:
        while sent < (1 << 30) and not answered.is_set():
            s.sendall(frame)
            sent += len(chunk)
    except OSError:
        pass  # the service closed the connection: that is the refusal
    answered.wait(30)
    s.close()
    reader.join(5)
    assert reply_box and reply_box[0].startswith(b"HTTP/1.1 413"), reply_box
    assert sent < (64 << 20), f"sent {sent >> 20} MiB before the refusal"
    # nothing of the refused uploads stays: no job, no directory
    assert srv.json("GET", "/api/v1/jobs")["jobs"] == []
    assert sorted(p.name for p in srv.jobs.iterdir()
                  if not p.name.startswith("jobs.sqlite")) == []
    assert srv.submit("echo still here\n")["state"] in ("queued", "running")


def test_several_tokens_at_once_and_quotas(serve) -> None:
    users = {"ann": {"max_jobs": 3}, "ben": {"max_jobs": 3}, "cat": {"max_jobs": 1}}
    srv = serve(users=users, extra=("--max-running", "2"))
    script = "#!/bin/bash\nset -e\necho \"$1\" > who.txt\nseq 1 $2 > n.txt\nsleep 0.3\n"
    ids: dict[str, list[str]] = {u: [] for u in users}
    errors: list[BaseException] = []

    def user(name: str, n: int) -> None:
        try:
            for i in range(n):
                ids[name].append(srv.submit(script, [f"{name}-{i}", str(i + 3)],
                                            token=name)["id"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=user, args=(u, 1 if u == "cat" else 3)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # cat may have one job at a time: the second is refused while the first is active
    status, _, resp = srv.request("POST", "/api/v1/jobs", token="cat",
                                  body={"script": "echo again"})
    assert status == 429 and "max_jobs = 1" in _one_line_error(resp)
    for name, jobs in ids.items():
        for i, job in enumerate(jobs):
            st = srv.wait(job, token=name)
            assert st["state"] == "succeeded", st
            _, _, who = srv.request("GET", f"/api/v1/jobs/{job}/outputs/who.txt", token=name)
            assert who == f"{name}-{i}\n".encode()
            _, _, n = srv.request("GET", f"/api/v1/jobs/{job}/outputs/n.txt", token=name)
            assert n.split() == [str(k).encode() for k in range(1, i + 4)]
        listed = {j["id"] for j in srv.json("GET", "/api/v1/jobs", token=name)["jobs"]}
        assert listed == set(jobs)
        for other, theirs in ids.items():
            if other != name:
                assert srv.request("GET", f"/api/v1/jobs/{theirs[0]}", token=name)[0] == 404
    assert srv.submit("echo again\n", token="cat")["state"] in ("queued", "running")


def test_output_quota(serve) -> None:
    """A token's jobs keep at most max_output bytes: a job may write what is left, and once
    nothing is left submissions are refused until jobs are deleted."""
    srv = serve(users={"alice": {"max_output": "1M"}})
    st = srv.wait(srv.submit("seq 1 100000 > big.txt\n")["id"])  # 588,895 bytes
    assert st["state"] == "succeeded" and st["output_bytes"] >= 588895, st
    info = srv.json("GET", "/api/v1/info")
    assert info["quota"]["output_bytes"] == st["output_bytes"]
    over = srv.wait(srv.submit("seq 1 100000 > big.txt\n")["id"])
    assert over["state"] == "failed" and "output limit" in over["reason"], over
    used = srv.json("GET", "/api/v1/info")["quota"]["output_bytes"]
    assert used >= 1 << 20  # the second job's file was cut at what was left
    status, _, resp = srv.request("POST", "/api/v1/jobs", body={"script": "echo hi"})
    assert status == 507 and "max_output" in _one_line_error(resp)
    for job in (st, over):
        assert srv.json("DELETE", f"/api/v1/jobs/{job['id']}")["deleted"] is True
        assert srv.request("GET", f"/api/v1/jobs/{job['id']}")[0] == 404
        assert not (srv.jobs / job["id"]).exists()
    assert srv.json("GET", "/api/v1/info")["quota"]["output_bytes"] == 0
    assert srv.wait(srv.submit("seq 1 100000 > big.txt\n")["id"])["state"] == "succeeded"


def test_log_follow_cancel_and_delete(serve) -> None:
    srv = serve(extra=("--max-running", "1"))
    job = srv.submit("#!/bin/bash\nfor i in 1 2 3; do echo line $i; sleep 0.3; done\n")["id"]
    t0 = time.monotonic()
    status, _, log = srv.request("GET", f"/api/v1/jobs/{job}/log?follow=1")
    assert status == 200 and time.monotonic() - t0 > 0.5  # it streamed until the end
    lines = log.splitlines()
    assert [ln for ln in lines if ln.startswith(b"line ")] == [b"line 1", b"line 2", b"line 3"]
    assert lines[-1] == b"[shoal serve] job succeeded"
    status, hdrs, tail = srv.request("GET", f"/api/v1/jobs/{job}/log?offset=7")
    assert tail == log[7:] and int(hdrs["x-log-offset"]) == len(log)
    long_job = srv.submit("sleep 60\n")["id"]
    queued = srv.submit("echo never\n")["id"]
    deadline = time.monotonic() + 30
    while srv.json("GET", f"/api/v1/jobs/{long_job}")["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert srv.json("GET", f"/api/v1/jobs/{queued}")["state"] == "queued"
    st = srv.json("POST", f"/api/v1/jobs/{queued}/cancel", expect=202)
    assert st["state"] == "cancelled"
    t0 = time.monotonic()
    srv.json("POST", f"/api/v1/jobs/{long_job}/cancel", expect=202)
    st = srv.wait(long_job, timeout=30)
    assert st["state"] == "cancelled" and time.monotonic() - t0 < 15
    status, _, resp = srv.request("GET", f"/api/v1/jobs/{long_job}/archive")
    assert status == 200
    assert srv.json("DELETE", f"/api/v1/jobs/{long_job}")["deleted"]
    assert srv.request("GET", f"/api/v1/jobs/{long_job}")[0] == 404


def test_restart_keeps_finished_jobs_and_fails_running_ones(serve) -> None:
    # --no-resume: running jobs fail at a restart (resuming: tests/test_serve_resume.py)
    srv = serve(extra=("--max-running", "1", "--no-resume"))
    done = srv.submit("echo kept > kept.txt\n")["id"]
    assert srv.wait(done)["state"] == "succeeded"
    running = srv.submit("echo started\nsleep 120\n")["id"]
    queued = srv.submit("echo resumed > resumed.txt\n")["id"]
    deadline = time.monotonic() + 30
    while srv.json("GET", f"/api/v1/jobs/{running}")["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    srv.stop(signal.SIGKILL)  # a crash: the service and its jobs die at once
    srv.start()
    st = srv.json("GET", f"/api/v1/jobs/{done}")
    assert st["state"] == "succeeded"
    assert srv.request("GET", f"/api/v1/jobs/{done}/outputs/kept.txt")[2] == b"kept\n"
    st = srv.json("GET", f"/api/v1/jobs/{running}")
    assert st["state"] == "failed" and "service stopped" in st["reason"]
    st = srv.wait(queued)
    assert st["state"] == "succeeded"
    assert srv.request("GET", f"/api/v1/jobs/{queued}/outputs/resumed.txt")[2] == b"resumed\n"
    # a clean stop (SIGTERM) ends running jobs with a reason too
    running = srv.submit("sleep 120\n")["id"]
    while srv.json("GET", f"/api/v1/jobs/{running}")["state"] != "running":
        time.sleep(0.1)
    assert srv.stop() == 0
    srv.start()
    st = srv.json("GET", f"/api/v1/jobs/{running}")
    assert st["state"] == "failed" and "service stopped" in st["reason"]
