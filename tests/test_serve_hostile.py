# ruff: noqa: F811  (the `serve` fixture is imported, then named as a parameter)
"""Hostile jobs through HTTP: each is contained (refused by the strict compiler or stopped by
the sandbox) with a clear one-line reason, and the service keeps serving other tokens."""

from __future__ import annotations

import io
import secrets
import socket
import tarfile
import threading
import time
from pathlib import Path

import pytest

from tests.test_serve_common import needs_aiohttp, needs_sandbox, serve  # noqa: F401

pytestmark = [needs_aiohttp, needs_sandbox, pytest.mark.timeout(240)]


def _shadow_lines() -> list[bytes]:
    """The lines of the host's /etc/shadow (a leak would show them whole)."""
    try:
        return [ln for ln in Path("/etc/shadow").read_bytes().splitlines() if ln.strip()]
    except OSError:
        return []


def test_hostile_jobs_are_contained_and_others_still_run(serve, tmp_path: Path) -> None:
    srv = serve(users={"eve": {"max_jobs": 20}, "bob": {"max_jobs": 5}},
                extra=("--wall", "60", "--output", "20M", "--max-running", "4"))
    # endless jobs on a second service with a short wall limit (the first one's is long, so
    # that refusals never race it on a loaded machine)
    endless = serve(users={"eve": {}}, extra=("--wall", "4", "--max-running", "2"))
    forever = {"never_ends": "sleep 100000\n", "loops_forever": "while true; do echo x; done\n"}
    forever_ids = {name: endless.submit(script, token="eve")["id"]
                   for name, script in forever.items()}
    data_file = srv.data / "keep.txt"
    data_file.write_text("precious\n")
    # bob's secret, written by his job
    secret = secrets.token_hex(16)
    bob_job = srv.submit(f"echo {secret} > secret.txt\n", token="bob")["id"]
    assert srv.wait(bob_job, token="bob")["state"] == "succeeded"
    # a listener on the host's loopback that no job may reach
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                continue

    acceptor = threading.Thread(target=accept)
    acceptor.start()
    hostile = {
        "rm_root": "rm -rf /\n",
        "rm_data": "rm -f /data/keep.txt\n",
        "shadow": "cat /etc/shadow > s.txt\n",
        "other_job_host_path": f"cat {srv.jobs}/{bob_job}/work/secret.txt > got.txt\n",
        "other_job_sandbox_path": f"cat /work/../{bob_job}/work/secret.txt > got2.txt\n",
        "socket": f"echo hi > /dev/tcp/127.0.0.1/{port}\n",
        "fork_bomb": ":(){ :|:& };:\n",
        "fork_bomb_named": "f() { f | f & }; f\n",
        "fill_disk": "head -c 100G /dev/zero > big.bin\n",
        "links_out": "ln -s /etc/shadow shadow.txt\nln -s /work/.. up\necho ok > ok.txt\n",
    }
    t0 = time.monotonic()
    ids = {name: srv.submit(script, token="eve")["id"] for name, script in hostile.items()}
    # the service answers while they run, and another token's job runs to the end
    benign = srv.submit("#!/bin/bash\nset -e\nseq 1 5 > n.txt\ncat /data/keep.txt > k.txt\n",
                        token="bob")["id"]
    for _ in range(5):
        t = time.monotonic()
        srv.json("GET", f"/api/v1/jobs/{ids['fill_disk']}", token="eve")
        endless.json("GET", f"/api/v1/jobs/{forever_ids['never_ends']}", token="eve")
        assert time.monotonic() - t < 4.0
        time.sleep(0.2)
    st = srv.wait(benign, token="bob", timeout=120)
    assert st["state"] == "succeeded", st
    assert srv.request("GET", f"/api/v1/jobs/{benign}/outputs/k.txt", token="bob")[2] == \
        b"precious\n"
    res = {name: srv.wait(job, token="eve", timeout=120) for name, job in ids.items()}
    stop.set()
    acceptor.join()
    listener.close()
    assert time.monotonic() - t0 < 150

    def reason(name: str) -> str:
        r = res[name]["reason"]
        assert isinstance(r, str) and "\n" not in r, res[name]
        return r

    # refused by the strict compiler before anything ran
    for name in ("rm_root", "rm_data", "fork_bomb", "fork_bomb_named"):
        assert res[name]["state"] == "failed" and reason(name).startswith("refused: "), res[name]
    assert data_file.read_text() == "precious\n"
    # stopped by the sandbox's limits
    assert reason("fill_disk") == "output limit 20.0 MiB exceeded"
    assert sum(p.stat().st_size for p in (srv.jobs / ids["fill_disk"] / "work").rglob("*")
               if p.is_file()) <= 21 << 20
    for job in forever_ids.values():
        st = endless.wait(job, token="eve", timeout=120)
        assert st["state"] == "failed" and st["reason"] == "wall time limit 4 s reached", st
    # nothing secret leaked into any output or log
    leaks = [secret.encode(), *_shadow_lines()]
    for name, job in ids.items():
        _, _, log = srv.request("GET", f"/api/v1/jobs/{job}/log", token="eve")
        blobs = [log]
        status, _, tar = srv.request("GET", f"/api/v1/jobs/{job}/archive", token="eve")
        assert status == 200
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            for m in tf:
                assert m.isfile() or m.isdir(), (name, m.name)
                if m.isfile():
                    blobs.append(tf.extractfile(m).read())  # type: ignore[union-attr]
        for blob in blobs:
            for leak in leaks:
                assert leak not in blob, f"{name} leaked a secret"
    for name in ("shadow", "other_job_host_path", "other_job_sandbox_path"):
        assert res[name]["state"] == "failed", res[name]
    # the socket never reached the host
    assert accepted == []
    _, _, log = srv.request("GET", f"/api/v1/jobs/{ids['socket']}/log", token="eve")
    assert b"Connection refused" in log or res["socket"]["reason"], log
    # links the job planted are neither listed nor served
    links = ids["links_out"]
    outs = srv.json("GET", f"/api/v1/jobs/{links}/outputs", token="eve")
    assert [f["name"] for f in outs["files"]] == ["ok.txt"]
    for name in ("shadow.txt", "up/jobs.sqlite", f"up/{bob_job}/work/secret.txt"):
        assert srv.request("GET", f"/api/v1/jobs/{links}/outputs/{name}", token="eve")[0] == 404
    # and bob's job is still his alone
    assert srv.request("GET", f"/api/v1/jobs/{bob_job}", token="eve")[0] == 404
    assert srv.request("GET", f"/api/v1/jobs/{bob_job}/outputs/secret.txt", token="bob")[2] == \
        f"{secret}\n".encode()
