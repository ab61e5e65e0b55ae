# ruff: noqa: F811  (the `serve` fixture is imported, then named as a parameter)
"""`shoal serve --connect F`: a job's commands run on the agents of a real `shoal head`
(two real `shoal agent` processes), each in a sandbox on its node. An NCO job gives bash's
files; hostile jobs stay contained; wall time, cancel and delete leave no process on the
agents; a raw command run by the per-command sandbox on an agent is contained too."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shoal import Executor
from shoal.service.sandbox import Limits
from shoal.service.sandbox_cmd import task_check, task_run
from shoal.service.sandbox_host import host
from tests.conftest import stop_procs
from tests.script.script_helpers import needs_nco, run_bash, snapshot, write_model
from tests.test_serve_api import NCO_SCRIPT
from tests.test_serve_common import needs_aiohttp, needs_sandbox, serve  # noqa: F401

pytestmark = [needs_aiohttp, needs_sandbox, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory):
    """`shoal head` on loopback and two `shoal agent`s (a1, a2; two slots each), shared by
    this module's tests; yields the connection file. A client silent for 4 s is lost (a
    killed service's commands stop)."""
    tmp_path = tmp_path_factory.mktemp("runtime")
    connfile = tmp_path / "run.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-m", "shoal", "head", "--bind",
                               "tcp://127.0.0.1:0", "--connection-file", str(connfile),
                               "--heartbeat-timeout", "4"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    try:
        deadline = time.monotonic() + 30
        while not connfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for name in ("a1", "a2"):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "shoal", "agent", "--connect", str(connfile), "--slots",
                 "2", "--name", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=env))
        with Executor(connect=str(connfile), start_timeout=30) as ex:
            ex.wait_for_agents(2, timeout=30)
        yield connfile
    finally:
        stop_procs(procs[::-1], signal.SIGINT)  # agents first; SIGINT: at once, no drain


def _job_processes(*needles: str) -> list[str]:
    """Processes whose command line holds one of ``needles`` (the job's id, a marker)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    me = str(os.getpid())
    return [ln for ln in out.splitlines()
            if any(n in ln for n in needles) and "ps -eo" not in ln
            and ln.split()[0] != me]


def _job_groups(tag: str) -> list[str]:
    """This machine's control groups of job ``tag`` (the per-command ones)."""
    h = host()
    found = []
    for parent in ([h.v2] if h.v2 else []) + list(h.v1.values()):
        try:
            found += [n for n in os.listdir(parent) if n.endswith(f"-{tag}")]
        except OSError:
            pass
    return found


def _gone(*needles: str, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := _job_processes(*needles)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _log(srv, job: str, token: str = "alice") -> str:
    return srv.request("GET", f"/api/v1/jobs/{job}/log", token=token)[2].decode()


@needs_nco
def test_nco_job_through_connect_gives_bash_files(runtime, serve, tmp_path: Path) -> None:
    srv = serve(extra=("--connect", str(runtime), "--workers", "4"))
    for k in range(3):
        write_model(srv.data / f"sresalb_m{k}.nc", k)
    local_in = tmp_path / "local_model.nc"
    write_model(local_in, 7)
    ref = tmp_path / "ref"
    shutil.copytree(srv.data, ref / "data")
    shutil.copy(local_in, ref / "local_model.nc")
    (ref / "job.sh").write_text(NCO_SCRIPT)
    b = run_bash(ref, "job.sh", str(ref / "data"))
    assert b.returncode == 0, b.stderr
    (ref / "job.sh").unlink()
    shutil.rmtree(ref / "data")
    expected = snapshot(ref)

    root = srv.json("GET", "/api/v1/data")["root"]
    job = srv.submit(NCO_SCRIPT, [root], inputs={"local_model.nc": local_in.read_bytes()})["id"]
    st = srv.wait(job)
    log = _log(srv, job)
    assert st["state"] == "succeeded" and st["returncode"] == 0, (st, log)
    assert "models: 3" in log
    assert st["progress"]["done"] == st["progress"]["total"] > 10
    # the commands ran on the runtime's agents, not in the service's sandbox
    line = next(ln for ln in log.splitlines() if "shoal-sandbox: connect:" in ln)
    assert " on 2 agent(s) (a1, a2)" in line, line
    got = tmp_path / "got"
    for f in srv.json("GET", f"/api/v1/jobs/{job}/outputs")["files"]:
        (got / f["name"]).parent.mkdir(parents=True, exist_ok=True)
        (got / f["name"]).write_bytes(srv.request("GET", f["url"])[2])
    assert snapshot(got) == expected
    assert not _job_groups(job)


def test_hostile_jobs_through_connect_are_contained(runtime, serve, tmp_path: Path) -> None:
    srv = serve(users={"eve": {"max_jobs": 20}, "bob": {}},
                extra=("--connect", str(runtime), "--wall", "60", "--output", "20M",
                       "--memory", "256M", "--nprocs", "64", "--max-running", "4",
                       "--workers", "2"))
    (srv.data / "keep.txt").write_text("precious\n")
    secret = secrets.token_hex(16)
    bob = srv.submit(f"echo {secret} > secret.txt\n", token="bob")["id"]
    assert srv.wait(bob, token="bob")["state"] == "succeeded"
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
        "shadow": "cat /etc/shadow > s.txt\n",
        "other_job": f"cat {srv.jobs}/{bob}/work/secret.txt > got.txt\n",
        "other_job_sandbox": f"cat /work/../{bob}/work/secret.txt > got2.txt\n",
        "socket": f"echo hi > /dev/tcp/127.0.0.1/{port}\n",
        "write_data": "echo x > /data/keep.txt\n",
        "fill_disk": "head -c 100G /dev/zero > big.bin\n",
        "memory_hog": "awk 'BEGIN { s = \"xxxxxxxxxxxxxxxx\"; while (1) s = s s }'\n",
        "fork_bomb": "awk 'BEGIN { system(\"f() { f | f & }; f; sleep 15\") }'\n",
    }
    try:
        ids = {name: srv.submit(script, token="eve")["id"] for name, script in hostile.items()}
        res = {name: srv.wait(job, token="eve", timeout=120) for name, job in ids.items()}
    finally:
        stop.set()
        acceptor.join()
        listener.close()
    for name in ("rm_root", "write_data"):
        assert res[name]["reason"].startswith("refused: "), res[name]
    assert (srv.data / "keep.txt").read_text() == "precious\n"
    for name in ("shadow", "other_job", "other_job_sandbox"):
        assert res[name]["state"] == "failed", res[name]
        assert "No such file or directory" in _log(srv, ids[name], "eve")
    assert accepted == []
    assert res["socket"]["state"] == "failed"
    # limits: the output of the job (watched by the service), memory and processes per
    # command (enforced on the agent's node), each named with the agent that hit it
    assert res["fill_disk"]["reason"] == "output limit 20.0 MiB exceeded", res["fill_disk"]
    big = srv.jobs / ids["fill_disk"] / "work" / "big.bin"
    assert not big.exists() or big.stat().st_size <= 20 << 20
    assert res["memory_hog"]["reason"].startswith("memory limit 256.0 MiB exceeded (a command "
                                                   "on a"), res["memory_hog"]
    assert res["fork_bomb"]["reason"].startswith("process limit 64 reached (a command on a"), \
        res["fork_bomb"]
    leaks = [secret, *(ln for ln in _shadow() if ln)]
    for name, job in ids.items():
        log = _log(srv, job, "eve")
        assert not any(leak in log for leak in leaks), name
        for f in srv.json("GET", f"/api/v1/jobs/{job}/outputs", token="eve")["files"]:
            body = srv.request("GET", f["url"], token="eve")[2].decode(errors="replace")
            assert not any(leak in body for leak in leaks), name
    assert not _gone(*ids.values())
    assert not any(_job_groups(j) for j in ids.values())


def _shadow() -> list[str]:
    try:
        return Path("/etc/shadow").read_text().splitlines()
    except OSError:
        return []


def test_wall_limit_cancel_and_delete_stop_commands_on_agents(runtime, serve) -> None:
    srv = serve(extra=("--connect", str(runtime), "--wall", "4", "--max-running", "3",
                       "--workers", "2"))
    mark = str(30000 + secrets.randbelow(30000))
    endless = srv.submit("sleep 100000\n")["id"]
    to_cancel = srv.submit(f"sleep {mark}1 &\nsleep {mark}2\n")["id"]
    to_delete = srv.submit(f"sleep {mark}3\n")["id"]
    deadline = time.monotonic() + 20
    while len(_job_processes(f"sleep {mark}")) < 3:  # all three run on the agents
        assert time.monotonic() < deadline, _job_processes(f"sleep {mark}")
        time.sleep(0.1)
    t = time.monotonic()
    st = srv.json("POST", f"/api/v1/jobs/{to_cancel}/cancel", expect=202)
    st = srv.wait(to_cancel)
    assert st["state"] == "cancelled" and time.monotonic() - t < 6, st
    assert not _gone(f"sleep {mark}1", f"sleep {mark}2", to_cancel)
    assert "stopped 2 command(s) on the runtime; swept 2 agent(s)" in _log(srv, to_cancel)
    assert srv.json("DELETE", f"/api/v1/jobs/{to_delete}")
    assert not (srv.jobs / to_delete).exists()
    assert not _gone(f"sleep {mark}3", to_delete)
    st = srv.wait(endless)
    assert st["state"] == "failed" and st["reason"] == "wall time limit 4 s reached", st
    assert not _gone(endless)
    deadline = time.monotonic() + 10  # the agents remove a job's groups as its sandboxes exit
    for j in (endless, to_cancel, to_delete):
        while _job_groups(j) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _job_groups(j)


def test_a_raw_command_on_an_agent_is_contained(runtime, tmp_path: Path) -> None:
    """What the per-command sandbox does with any command (not only compiled ones): what a
    subverted runner could send."""
    jobs = tmp_path / "jobs"
    job = jobs / "0123456789abcdef"
    (job / "work").mkdir(parents=True)
    os.chown(job / "work", host().uid, host().gid)
    other = jobs / "fedcba9876543210" / "work"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("other job\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "keep.txt").write_text("precious\n")
    hostile = ("rm -rf --no-preserve-root / 2>/dev/null; cat /etc/shadow; "
               f"cat {other}/secret.txt; ls {jobs}; echo x > /data/keep.txt; "
               "echo hi > /dev/tcp/1.1.1.1/80; id -u; echo done > out.txt")

    lim = {**Limits().__dict__, "nprocs": 32}

    def run(*argv: str) -> tuple[int, dict, str]:
        with Executor(connect=str(runtime)) as ex:
            st = ex.options(agent="a2").submit(task_run, list(argv), str(job), str(data), lim,
                                               job.name).result(60)
        return st["exit"], st, st["output"].decode(errors="replace")

    rc, st, err = run("/bin/bash", "-c", hostile)
    assert st["reason"] is None, (st, err)
    assert f"{host().uid}\n" in err  # the job user, not root
    assert (data / "keep.txt").read_text() == "precious\n"
    assert (other / "secret.txt").read_text() == "other job\n"
    assert "other job" not in err and "root:" not in err
    assert (job / "work" / "out.txt").read_text() == "done\n"
    assert Path("/etc/shadow").exists() or not Path("/etc").exists()
    # the job's stop marker: a command that reaches a node after a cancel does not start
    (job / "stop").touch()
    rc, st, err = run("/bin/sh", "-c", "echo ran > ran.txt")
    assert (rc, st["reason"]) == (137, "cancelled") and not (job / "work" / "ran.txt").exists()
    (job / "stop").unlink()
    # the service's check at its start: the agent sees the jobs directory (a file the service
    # wrote there) and the data directory, and can start a sandbox
    (jobs / ".probe-x").write_text("probe\n")
    with Executor(connect=str(runtime)) as ex:
        assert ex.options(agent="a1").submit(task_check, str(jobs), ".probe-x",
                                             str(data)).result(60) == []
        bad = ex.options(agent="a1").submit(task_check, str(jobs), ".probe-y",
                                            str(tmp_path / "nodata")).result(60)
    assert len(bad) == 2 and "is not the service's here" in bad[0], bad
    assert "data directory" in bad[1] and "is missing here" in bad[1], bad
    # the job directory must be where the agent sees it
    shutil.rmtree(job)
    rc, st, err = run("/bin/true")
    assert rc == 125 and "is not visible on" in st["reason"], st
    # the same from a shell: the output on stderr, the result as one JSON line on stdout
    (job / "work").mkdir(parents=True)
    r = subprocess.run([sys.executable, "-m", "shoal.service.sandbox_cmd", "run", "--job-dir",
                        str(job), "--data", str(data), "--tag", "x1", "--", "/bin/sh", "-c",
                        "cat /data/keep.txt; exit 3"], capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stderr) == (3, "precious\n"), r
    assert json.loads(r.stdout)["exit"] == 3


def test_bad_connect_is_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    r = subprocess.run([sys.executable, "-m", "shoal", "serve", "--data", str(data), "--jobs",
                        str(tmp_path / "jobs"), "--listen", "127.0.0.1:0", "--connect",
                        str(tmp_path / "nope.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == (f"shoal serve: error: --connect "
                                                 f"{tmp_path / 'nope.json'}: no such connection "
                                                 "file")


def test_a_stopped_or_killed_service_leaves_no_command_on_the_agents(runtime, serve) -> None:
    """SIGTERM: the service stops its jobs' commands itself and exits. SIGKILL of the service
    (and its session): the head declares its client lost and the agents stop the job's
    commands. Either way nothing of the job keeps running anywhere."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        srv = serve(extra=("--connect", str(runtime)))
        mark = str(30000 + secrets.randbelow(30000))
        job = srv.submit(f"sleep {mark}5 &\nsleep {mark}6\n")["id"]
        deadline = time.monotonic() + 20
        while len(_job_processes(f"sleep {mark}")) < 2:
            assert time.monotonic() < deadline, _job_processes(f"sleep {mark}")
            time.sleep(0.1)
        t = time.monotonic()
        rc = srv.stop(sig, timeout=20)
        if sig == signal.SIGTERM:
            assert rc == 0 and time.monotonic() - t < 10, rc
            assert not _job_processes(f"sleep {mark}", job)  # gone before the service exited
        assert not _gone(f"sleep {mark}", job, timeout=15)


def test_the_bridge_refuses_bad_requests(runtime, tmp_path: Path) -> None:
    """The service's side of the runner's pipe (what a subverted runner could write): a good
    request runs its command on an agent and is answered; a malformed one stops the job with
    one line, and nothing it asked for runs."""
    from shoal.service.connect import Bridge, _client

    job = tmp_path / "jobs" / "00112233aabbccdd"
    (job / "work").mkdir(parents=True)
    os.chown(job / "work", host().uid, host().gid)
    data = tmp_path / "data"
    data.mkdir()
    b = Bridge(_client(str(runtime)), job, data, Limits(workers=2), tmp_path / "log", job.name)
    req, resp = b.child_fds
    answers = os.fdopen(resp, "r")
    try:
        os.write(req, json.dumps({"op": "submit", "id": 1, "argv": ["/bin/sh", "-c",
                                  "echo hi >&2; id -u > who.txt"], "cwd": "/work",
                                  "after": [], "prefer": None}).encode() + b"\n")
        got = json.loads(answers.readline())
        assert (got["op"], got["id"], got["rc"]) == ("done", 1, 0), got
        assert got["agent"] in ("a1", "a2") and b"hi" in base64.b64decode(got["stderr"])
        assert (job / "work" / "who.txt").read_text() == f"{host().uid}\n"
        assert b.reason() is None
        os.write(req, json.dumps({"op": "submit", "id": 2, "argv": ["/bin/sh", "-c",
                                  "touch bad.txt"], "cwd": "/etc", "after": [],
                                  "prefer": None}).encode() + b"\n")
        deadline = time.monotonic() + 10
        while b.reason() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.reason() == ("sandbox: bad request from the job's runner (cwd '/etc' is not "
                              "below /work)"), b.reason()
    finally:
        os.close(req)
        b.finish()
        answers.close()
    assert not (job / "work" / "bad.txt").exists()
    assert "connect: 1 command(s) ran on 1 agent(s)" in (tmp_path / "log").read_text()


# burns 0.6 s of its own CPU time (read from /proc), however loaded the machine is
BURN = ("while :; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; "
        "read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u s _ < /proc/$$/stat; "
        "[ $((u + s)) -ge 60 ] && break; done")


def test_cpu_time_is_limited_per_command_and_summed_over_the_job(runtime, tmp_path: Path
                                                                 ) -> None:
    from shoal.service.connect import Bridge, _client

    job = tmp_path / "jobs" / "0011223344556677"
    (job / "work").mkdir(parents=True)
    os.chown(job / "work", host().uid, host().gid)
    data = tmp_path / "data"
    data.mkdir()
    # one command: its node's watch stops it at the limit
    lim = {**Limits().__dict__, "cpu_s": 1}
    with Executor(connect=str(runtime)) as ex:
        st = ex.submit(task_run, ["/bin/sh", "-c", "while :; do :; done"], str(job),
                       str(data), lim, job.name).result(60)
    assert (st["exit"], st["reason"]) == (137, "CPU time limit 1 s exceeded"), st
    # commands each under the limit: the service adds their CPU time up
    b = Bridge(_client(str(runtime)), job, data, Limits(cpu_s=1, workers=1),
               tmp_path / "log", job.name)
    req, resp = b.child_fds
    answers = os.fdopen(resp, "r")
    try:
        for k in (1, 2):
            os.write(req, json.dumps({"op": "submit", "id": k, "argv": ["/bin/bash", "-c",
                                      BURN], "cwd": "/work", "after": [],
                                      "prefer": None}).encode() + b"\n")
            got = json.loads(answers.readline())
            assert (got["id"], got["rc"]) == (k, 0), got
        assert b.reason() == "CPU time limit 1 s exceeded", (b.reason(), b.cpu)
        assert 1.2 <= b.cpu < 2, b.cpu
    finally:
        os.close(req)
        b.finish()
        answers.close()
