"""`shoal serve` started as an unprivileged user (a user the test creates and removes): jobs
run in a user namespace of their own (bwrap --unshare-user) with rlimits, give bash's files,
cannot read the service's files or another job's, and are stopped by their limits."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.test_serve_common as common
from tests.script.script_helpers import REPO
from tests.test_serve_common import Server, needs_aiohttp, needs_sandbox

pytestmark = [needs_aiohttp, needs_sandbox, pytest.mark.timeout(180),
              pytest.mark.skipif(os.geteuid() != 0, reason="creates a user: needs root"),
              pytest.mark.skipif(shutil.which("useradd") is None or shutil.which("runuser") is None,
                                 reason="needs useradd and runuser")]


def _python_for(user: str) -> list[str] | None:
    """An interpreter the user can run with this one's packages, or None."""
    sites = [str(REPO), *site.getsitepackages()]
    for exe in (os.path.realpath(sys.executable), "/usr/bin/python3"):
        cmd = ["runuser", "-u", user, "--", "env", f"PYTHONPATH={':'.join(sites)}", exe]
        r = subprocess.run([*cmd, "-c", "import sys, aiohttp, zmq, msgpack, shoal; "
                            "print(sys.version_info[:2])"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == str(sys.version_info[:2]):
            return cmd
    return None


@pytest.fixture
def user() -> Iterator[str]:
    name = f"shoal-t{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def test_an_unprivileged_service_runs_jobs_in_user_namespaces(user: str,
                                                               monkeypatch) -> None:
    py = _python_for(user)
    if py is None:
        pytest.skip(f"no Python that {user} may run with this one's packages (the interpreter "
                    "lives under a private directory)")
    pw = pwd.getpwnam(user)
    top = Path(tempfile.mkdtemp(prefix="shoal-rootless-", dir="/tmp"))
    srv: Server | None = None
    try:
        os.chmod(top, 0o755)
        data = top / "data"
        data.mkdir()
        (data / "in.txt").write_text("c\na\nb\n")
        (top / "srv").mkdir()
        monkeypatch.setattr(common, "SERVE_CMD", [*py, "-m", "shoal", "serve"])
        srv = Server(top / "srv", data, {"alice": {}, "bob": {}},
                     extra=("--wall", "5", "--nprocs", "40"))
        for p in [top, *top.rglob("*")]:
            os.lchown(p, pw.pw_uid, pw.pw_gid)
        srv.start()
        err = (top / "srv" / "serve.err").read_text()
        assert "user namespace per job" in err, err
        assert srv.proc is not None
        # a normal job: the files bash gives
        script = ("#!/bin/bash\nset -e\nsort /data/in.txt > sorted.txt\n"
                  "wc -l sorted.txt > n.txt\necho done\n")
        ref = top / "ref"
        ref.mkdir()
        (ref / "job.sh").write_text(script.replace("/data/", f"{data}/"))
        assert subprocess.run(["bash", "job.sh"], cwd=ref).returncode == 0
        job = srv.submit(script, token="bob")["id"]
        st = srv.wait(job, token="bob")
        assert st["state"] == "succeeded", (st, srv.request("GET", f"/api/v1/jobs/{job}/log",
                                                            token="bob")[2])
        work = srv.jobs / job / "work"
        for name in ("sorted.txt", "n.txt"):
            assert (work / name).read_bytes() == (ref / name).read_bytes()
        assert (work / "sorted.txt").stat().st_uid == pw.pw_uid  # the service's user
        # the service's own files and another job's are not in a job's view
        spy = srv.submit(f"cat {srv.jobs}/jobs.sqlite > db.bin\n"
                         f"cat {work}/sorted.txt > stolen.txt\n"
                         f"cat {srv.tokens_file} > tokens.txt\n")["id"]
        st = srv.wait(spy)
        assert st["state"] == "failed", st
        spy_work = srv.jobs / spy / "work"
        assert all(not (spy_work / n).exists() or (spy_work / n).stat().st_size == 0
                   for n in ("db.bin", "stolen.txt", "tokens.txt"))
        # a job that never ends is stopped at its wall time, and leaves no process
        t0 = time.monotonic()
        st = srv.wait(srv.submit("sleep 100000\n")["id"])
        assert st["state"] == "failed" and st["reason"] == "wall time limit 5 s reached", st
        assert time.monotonic() - t0 < 60
        left = subprocess.run(["pgrep", "-u", user, "-x", "sleep"], capture_output=True)
        assert left.returncode == 1, left.stdout  # no process named sleep of that user
    finally:
        if srv is not None:
            srv.stop()
        shutil.rmtree(top, ignore_errors=True)


# run as the test user: two sandboxes with a process limit of 10, while the user has 15 other
# processes outside: 4 processes inside start, 30 do not
_NPROC = r"""
import json, subprocess, sys
from pathlib import Path
from shoal.service.sandbox import Limits, run_sandboxed
top = Path(sys.argv[1])
outside = [subprocess.Popen(["sleep", "60"]) for _ in range(15)]
out = {}
try:
    for name, n in (("few", 3), ("many", 30)):
        job = top / name
        (job / "work").mkdir(parents=True)
        r = run_sandboxed(["/bin/sh", "-c", f"for i in $(seq {n}); do sleep 2 & done; wait; "
                           "echo finished"], job_dir=job, data_dir=top / "data",
                          limits=Limits(nprocs=10, wall_s=30), log=job / "log")
        out[name] = [r.returncode, (job / "log").read_text()]
finally:
    for p in outside:
        p.kill()
        p.wait()
print(json.dumps(out))
"""


def test_the_process_limit_counts_the_jobs_own_processes(user: str) -> None:
    py = _python_for(user)
    if py is None:
        pytest.skip(f"no Python that {user} may run with this one's packages")
    pw = pwd.getpwnam(user)
    top = Path(tempfile.mkdtemp(prefix="shoal-rootless-", dir="/tmp"))
    try:
        (top / "data").mkdir()
        for p in [top, *top.rglob("*")]:
            os.lchown(p, pw.pw_uid, pw.pw_gid)
        r = subprocess.run([*py, "-c", _NPROC, str(top)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        rc, log = out["few"]
        assert rc == 0 and "finished" in log, log  # 15 processes outside do not count
        rc, log = out["many"]
        assert "fork" in log.lower(), log  # the 11th process inside cannot start
    finally:
        shutil.rmtree(top, ignore_errors=True)
