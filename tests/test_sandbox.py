"""The job sandbox of `shoal serve` (shoal/service/sandbox.py), with real processes.

A script's outputs equal bash's; hostile scripts are refused by the strict compiler or stopped
by the sandbox with a one-line reason; in every case the host is left as it was (data, other
jobs' directories, files outside) and no process of the job is left behind. Raw commands run
inside the sandbox show that the namespaces themselves, not only the compiler, contain them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from shoal.service.sandbox import JobResult, Limits, check, run_job, run_sandboxed
from shoal.service.sandbox_host import host
from tests.script.script_helpers import NCO, make_models, ncdump_normal, needs_nco

# skipped where the sandbox cannot exist (not root, bwrap missing); where it should, a
# sandbox that does not start fails test_this_machine_can_run_jobs with bwrap's message
_static = host().problems()
pytestmark = pytest.mark.skipif(bool(_static), reason="; ".join(_static) or "ready")

FAST = Limits(cpu_s=60, memory_bytes=1 << 30, nprocs=128, wall_s=60, output_bytes=256 << 20)


@pytest.fixture
def world(tmp_path: Path):
    """A data directory, this job's directory, another job's directory with a secret, and a
    record of everything outside this job's ``work`` that must stay as it was."""
    tmp_path = tmp_path / "world"
    data = tmp_path / "data"
    data.mkdir(parents=True)
    (data / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (data / "sub").mkdir()
    (data / "sub" / "b.txt").write_text("delta\n")
    if NCO:
        make_models(data, 2)
    other = tmp_path / "jobs" / "other"
    (other / "work").mkdir(parents=True)
    (other / "work" / "secret.txt").write_text("the other job's result\n")
    job = tmp_path / "jobs" / "this"
    job.mkdir(parents=True)
    before = _state(tmp_path, job)
    token = uuid.uuid4().hex
    yield {"data": data, "job": job, "other": other, "token": token, "root": tmp_path}
    assert _state(tmp_path, job) == before, "a file outside the job's work directory changed"
    assert not _leftovers(job, token), "processes of the job are still running"


def _state(root: Path, job: Path) -> dict[str, str]:
    """Every file under ``root`` except the job's work tree and log, with its content hash;
    plus /etc/shadow's hash (a job must not read or change it)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == job:
            dirnames[:] = [d for d in dirnames if d != "work"]
            filenames = [f for f in filenames if f not in ("log", "job.sh")]
        for n in filenames + dirnames:
            p = Path(dirpath) / n
            st = p.lstat()
            h = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not \
                p.is_symlink() else ""
            out[str(p.relative_to(root))] = f"{oct(st.st_mode)} {st.st_uid} {h}"
    if os.path.exists("/etc/shadow"):
        out["/etc/shadow"] = hashlib.sha256(Path("/etc/shadow").read_bytes()).hexdigest()
    return out


def _leftovers(job: Path, token: str) -> list[int]:
    """Processes whose working directory is the job's work tree or whose command line holds
    the test's token (run by the sandbox, seen from the host)."""
    try:
        w = (job / "work").stat()
    except OSError:
        w = None
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if token.encode() in cmd:
                out.append(int(pid))
                continue
            st = os.stat(f"/proc/{pid}/cwd")
            if w is not None and (st.st_dev, st.st_ino) == (w.st_dev, w.st_ino):
                out.append(int(pid))
        except OSError:
            continue
    return out


def _job(world: dict, text: str, args: list[str] | None = None, limits: Limits = FAST,
         cancel: threading.Event | None = None) -> JobResult:
    script = world["job"] / "job.sh"
    script.write_text(f"# {world['token']}\n{text}")
    t0 = time.monotonic()
    r = run_job(script, args or [], job_dir=world["job"], data_dir=world["data"],
                limits=limits, log=world["job"] / "log", cancel=cancel)
    world["elapsed"] = time.monotonic() - t0
    return r


def _raw(world: dict, cmd: str, limits: Limits = FAST) -> tuple[JobResult, str]:
    """Run ``cmd`` with bash inside the sandbox; return the result and the log."""
    t0 = time.monotonic()
    r = run_sandboxed(["/bin/bash", "-c", f": {world['token']}; {cmd}"], job_dir=world["job"],
                      data_dir=world["data"], limits=limits, log=world["job"] / "log")
    world["elapsed"] = time.monotonic() - t0
    return r, (world["job"] / "log").read_text()


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ same results as bash

COREUTILS = """\
d=$1
mkdir -p out
for f in $d/a.txt $d/sub/b.txt; do
  n=$(basename $f .txt)
  sed 's/a/A/g' $f > out/$n.up
  sort -r out/$n.up > out/$n.sorted
done
cat out/*.sorted | tr a-z A-Z > all.txt
wc -l < all.txt > count.txt
gzip -nk all.txt
cat count.txt; echo finished
"""


def test_coreutils_script_gives_bash_files(world, tmp_path):
    r = _job(world, COREUTILS, ["/data"])
    assert r == JobResult(0, None), (world["job"] / "log").read_text()
    ref = tmp_path / "bash"
    ref.mkdir()
    (ref / "job.sh").write_text(COREUTILS)
    subprocess.run(["bash", "job.sh", str(world["data"])], cwd=ref, check=True,
                   capture_output=True)
    (ref / "job.sh").unlink()
    got = _files(world["job"] / "work")
    assert got == _files(ref)
    log = (world["job"] / "log").read_text()
    assert "4\nfinished" in log and "progress: compiled" in log
    assert "progress: done: 10 of 10 commands succeeded, 0 failed, 0 not run" in log
    assert log.splitlines()[-1].startswith("shoal-sandbox: end: exit status 0")


NCO_SCRIPT = """\
d=$1
for m in ccma_cgcm3_1 ncar_ccsm3_0; do
  ncwa -O -a lat,lon $d/sresalb_$m.nc gm_$m.nc
  ncra -O gm_$m.nc avg_$m.nc
done
nces -O avg_*.nc ens.nc
ncbo -O --op_typ=sub avg_ccma_cgcm3_1.nc ens.nc anom.nc
rm gm_*.nc
"""


@needs_nco
def test_nco_script_gives_bash_files(world, tmp_path):
    r = _job(world, NCO_SCRIPT, ["/data"])
    assert r == JobResult(0, None), (world["job"] / "log").read_text()
    ref = tmp_path / "bash"
    ref.mkdir()
    (ref / "job.sh").write_text(NCO_SCRIPT)
    subprocess.run(["bash", "job.sh", str(world["data"])], cwd=ref, check=True)
    (ref / "job.sh").unlink()
    work = world["job"] / "work"
    names = sorted(p.name for p in work.iterdir())
    assert names == sorted(p.name for p in ref.iterdir()) == \
        ["anom.nc", "avg_ccma_cgcm3_1.nc", "avg_ncar_ccsm3_0.nc", "ens.nc"]
    for n in names:
        assert ncdump_normal(work / n) == ncdump_normal(ref / n), n
    # the outputs belong to the job user, not to root
    assert all(p.stat().st_uid != 0 for p in work.iterdir()) or os.geteuid() != 0


def test_failing_script_keeps_bash_exit_status(world):
    r = _job(world, "set -e\ncp /data/a.txt x\ngrep nothing x > y\necho never > z\n")
    assert r == JobResult(1, None)
    assert not (world["job"] / "work" / "z").exists()


# ------------------------------------------------------------------ refused by the compiler

@pytest.mark.parametrize("text, words", [
    ("python3 -c 'import socket'\n", ["job.sh:2:", "unknown program 'python3'"]),
    ("echo start\nnc -l 8080\n", ["job.sh:3:", "unknown program 'nc'"]),
    ("rm -rf /\n", ["job.sh:2:", "removes '/',", "outside the working tree"]),
    ("rm -rf /data\n", ["job.sh:2:", "removes '/data'", "outside the working tree"]),
    ("echo x > /data/new.txt\n", ["job.sh:2:", "outside the working tree"]),
    # fork bombs written as shell functions never reach the run
    (":() { : | : & }\n:\n", ["job.sh:2:", "pipeline"]),
    ("f() { f & f; }\nf\n", ["job.sh:2:", "recursion too deep"]),
])
def test_strict_compiler_refuses(world, text, words):
    r = _job(world, text)
    assert r.returncode == 2 and r.reason is not None, r
    assert r.reason.startswith("refused: job.sh:") and "\n" not in r.reason
    for w in words:
        assert w in r.reason, r.reason
    assert list((world["job"] / "work").iterdir()) == []


def _shadow_lines() -> list[str]:
    try:
        return [ln for ln in Path("/etc/shadow").read_text().splitlines() if ln]
    except OSError:
        return []


def test_etc_shadow_is_not_there(world):
    # the compiler accepts reading a missing file (bash would run it and fail): it fails
    r = _job(world, "cat /etc/shadow > s.txt\n")
    log = (world["job"] / "log").read_text()
    assert r == JobResult(1, None), log
    assert "/etc/shadow: No such file or directory" in log
    assert (world["job"] / "work" / "s.txt").read_text() == ""
    assert not any(ln in log for ln in _shadow_lines())


def test_other_jobs_directory_is_not_there(world):
    # by its host path: not in the sandbox's file system
    r = _job(world, f"cat {world['other']}/work/secret.txt > s.txt\n")
    assert r == JobResult(1, None), r
    assert "secret.txt: No such file or directory" in (world["job"] / "log").read_text()
    res, log = _raw(world, f"cat {world['other']}/work/secret.txt; ls {world['root']}")
    assert res.returncode != 0 and "No such file or directory" in log
    assert "the other job's result" not in log


# ------------------------------------------------------------------ contained by the sandbox

def test_raw_rm_rf_root_changes_nothing_outside(world):
    (world["job"] / "work").mkdir()
    (world["job"] / "work" / "mine.txt").write_text("x")
    res, log = _raw(world, "rm -rf --no-preserve-root / 2>/dev/null; echo data: $(ls /data); "
                           "echo usr: $(ls /usr/bin | wc -l)")
    assert "data: a.txt " in log and " sub\n" in log
    assert "usr: 0" not in log
    assert not (world["job"] / "work" / "mine.txt").exists()  # its own tree: its to remove


def test_raw_etc_shadow_and_host_files_are_not_visible(world):
    res, log = _raw(world, "cat /etc/shadow; ls /root /home /var /srv 2>&1; id -u; "
                           "ls /etc")
    assert "/etc/shadow: No such file or directory" in log
    assert not any(ln in log for ln in _shadow_lines())
    uid = int([ln for ln in log.splitlines() if ln.isdigit()][0])
    assert uid != 0 or os.geteuid() != 0
    assert "shadow" not in log.split("ls /etc")[-1].split()  # not even listed


@pytest.fixture
def host_listener():
    """A TCP server on the host's loopback that records any connection."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.2)
    got: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            got.append(c.recv(100) or b"(connected)")
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], got
    stop.set()
    t.join()
    srv.close()


def test_no_network_strict_script(world, host_listener):
    port, got = host_listener
    # bash's /dev/tcp through a redirection the compiler accepts: the namespace stops it
    # (the exit status is not checked: the compiler takes `echo`'s status as known, 0)
    r = _job(world, f"echo hello > /dev/tcp/127.0.0.1/{port}\n"
                    "echo hi > /dev/tcp/1.1.1.1/80\n")
    assert r.reason is None
    log = (world["job"] / "log").read_text()
    assert "job.sh:2: command failed with exit status 1" in log
    assert "Connection refused" in log and "Network is unreachable" in log
    assert got == []


def test_no_network_raw(world, host_listener):
    port, got = host_listener
    res, log = _raw(world, f"""
python3 - <<'EOF'
import socket
for fam, addr in ((socket.AF_INET, ("127.0.0.1", {port})), (socket.AF_INET, ("1.1.1.1", 53)),
                  (socket.AF_INET6, ("2606:4700:4700::1111", 53))):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr)
        print("CONNECTED", addr)
    except OSError as e:
        print("blocked", addr, e.strerror)
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    print("CONNECTED vsock")
except OSError as e:
    print("blocked vsock", e.strerror)
print(sorted(n for _, n in socket.if_nameindex()))
EOF""")
    assert res.returncode == 0, log
    assert "CONNECTED" not in log and log.count("blocked") == 4, log
    assert "['lo']" in log
    assert got == []


def test_no_privilege_to_regain_inside(world):
    # binds are nosuid and no_new_privs is set: a set-uid program gives nothing
    res, log = _raw(world, "echo binds=$(grep -cE ' /(usr|data|work) ' /proc/self/mountinfo)"
                           " suid=$(grep -E ' /(usr|data|work) ' /proc/self/mountinfo | "
                           "grep -vc nosuid); grep -E '^(NoNewPrivs|CapEff|CapBnd)' "
                           "/proc/self/status; su -c id root 2>&1 | tail -1")
    assert "binds=3 suid=0" in log, log
    assert "NoNewPrivs:\t1" in log and "CapEff:\t0000000000000000" in log
    assert "CapBnd:\t0000000000000000" in log
    assert "uid=0(root)" not in log


def test_namespaces_and_mounts_are_refused_inside(world):
    res, log = _raw(world, "unshare -U true; echo u=$?; unshare -n true; echo n=$?; "
                           "mount -t tmpfs x /tmp; echo m=$?; "
                           "python3 -c 'import os; os.unshare(os.CLONE_NEWUSER)'; echo p=$?; "
                           "(command -v strace >/dev/null && strace -o /dev/null true); "
                           "echo s=$?; python3 -c 'import ctypes, sys; l = ctypes.CDLL(None); "
                           "sys.exit(0 if l.syscall(425, 1, 0) >= 0 or l.syscall(321, 0, 0, 0)"
                           " >= 0 else 1)'; echo i=$?")
    for k in ("u", "n", "m", "p", "s", "i"):
        assert f"{k}=0" not in log, log


def test_fork_bomb_is_stopped(world):
    lim = Limits(cpu_s=60, memory_bytes=1 << 30, nprocs=64, wall_s=30, output_bytes=64 << 20)
    # through an allowed tool: awk's system() runs a shell; it stays (sleep) so the job is
    # still running when the bomb reaches the limit (else the job's end kills the bomb first)
    r = _job(world, "awk 'BEGIN { system(\"f() { f | f & }; f; sleep 15\") }'\n", limits=lim)
    assert r.returncode == 137 and r.reason == "process limit 64 reached", r
    assert world["elapsed"] < 20


def test_100_gb_output_is_stopped_early(world):
    lim = Limits(cpu_s=60, memory_bytes=1 << 30, nprocs=64, wall_s=60, output_bytes=64 << 20)
    r = _job(world, "head -c 100G /dev/zero > big\n", limits=lim)
    assert r == JobResult(137, "output limit 64.0 MiB exceeded"), r
    size = sum(p.stat().st_size for p in (world["job"] / "work").rglob("*"))
    assert size <= 64 << 20
    # many files, none over the limit alone: the sum is watched
    res, log = _raw(world, "for i in $(seq 100); do head -c 10M /dev/zero > f$i; done",
                    limits=lim)
    assert res == JobResult(137, "output limit 64.0 MiB exceeded"), res
    size = sum(p.stat().st_size for p in (world["job"] / "work").rglob("*"))
    assert size < 64 << 20 + (400 << 20)  # what one check interval lets through, at most


def test_output_to_the_log_is_limited(world):
    lim = Limits(cpu_s=60, memory_bytes=1 << 30, nprocs=64, wall_s=60, output_bytes=8 << 20)
    res, log = _raw(world, "yes", limits=lim)
    assert res.returncode == 137 and res.reason.startswith("output limit 8.0 MiB"), res
    assert (world["job"] / "log").stat().st_size < (8 << 20) + 4096


def test_job_that_never_ends_hits_wall_time(world):
    lim = Limits(cpu_s=60, memory_bytes=1 << 30, nprocs=64, wall_s=3, output_bytes=64 << 20)
    r = _job(world, "sleep 1000\n", limits=lim)
    assert r == JobResult(137, "wall time limit 3 s reached"), r
    assert world["elapsed"] < 10


def test_memory_hog_is_stopped(world):
    lim = Limits(cpu_s=60, memory_bytes=256 << 20, nprocs=64, wall_s=60,
                 output_bytes=64 << 20)
    r = _job(world, "awk 'BEGIN { s = \"xxxxxxxxxxxxxxxx\"; while (1) s = s s }'\n",
             limits=lim)
    assert r.returncode == 137 and r.reason == "memory limit 256.0 MiB exceeded", r


def test_cpu_time_of_the_whole_tree_is_limited(world):
    lim = Limits(cpu_s=1, memory_bytes=1 << 30, nprocs=64, wall_s=60, output_bytes=64 << 20)
    res, log = _raw(world, "(while :; do :; done) & (while :; do :; done) & wait", limits=lim)
    assert res == JobResult(137, "CPU time limit 1 s exceeded"), res


def test_cancel_stops_at_once(world):
    cancel = threading.Event()
    threading.Timer(1.5, cancel.set).start()
    r = _job(world, "sleep 1000 &\nsleep 1000\n", cancel=cancel)
    assert r == JobResult(137, "cancelled"), r
    assert world["elapsed"] < 6
    assert not any(p.name.startswith(".shoal-scratch-")
                   for p in (world["job"] / "work").iterdir())


def test_two_jobs_at_once_do_not_see_each_other(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    jobs = [tmp_path / f"j{i}" for i in range(2)]
    results: list[JobResult] = []

    def one(j: Path) -> None:
        (j / "work").mkdir(parents=True)
        (j / "work" / "mine.txt").write_text(j.name)
        results.append(run_sandboxed(
            ["/bin/sh", "-c", f"sleep 0.5; ls -A /work > /work/seen; ls {tmp_path} >> /work/seen"
             " 2>&1; cat /work/mine.txt >> /work/seen"],
            job_dir=j, data_dir=data, limits=FAST, log=j / "log"))

    ts = [threading.Thread(target=one, args=(j,)) for j in jobs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [r.returncode for r in results] == [0, 0]
    for j in jobs:
        seen = (j / "work" / "seen").read_text()
        assert seen.startswith("mine.txt\n") and seen.endswith(j.name)
        assert "No such file or directory" in seen


def test_bad_data_dir_or_script_is_one_line(world):
    (world["job"] / "job.sh").write_text("echo hi\n")
    r = run_job(world["job"] / "job.sh", [], job_dir=world["job"],
                data_dir=world["root"] / "missing", limits=FAST, log=world["job"] / "log")
    assert r.returncode == 125 and "missing" in r.reason and "\n" not in r.reason
    r = run_job(world["job"] / "nope.sh", [], job_dir=world["job"], data_dir=world["data"],
                limits=FAST, log=world["job"] / "log")
    assert r == JobResult(125, f"sandbox: script {str(world['job'] / 'nope.sh')!r} not found")
    with pytest.raises(ValueError, match="Limits.wall_s must be a positive number, got 0"):
        run_sandboxed(["/bin/true"], job_dir=world["job"], data_dir=world["data"],
                      limits=Limits(wall_s=0), log=world["job"] / "log")


def test_this_machine_can_run_jobs():
    assert check() == []


def test_shutil_which_bwrap_recorded():
    # the facts docs/sandbox.md reports come from the same probe the sandbox uses
    from shoal.service.sandbox import describe

    line = describe()
    assert "bwrap" in line and shutil.which("bwrap") in line


def test_outputs_never_follow_links_the_job_left(world):
    # the job user owns work/: the service lists and opens it only through shoal.service.files
    from shoal.service.files import BadPath, job_files, open_under

    res, log = _raw(world, "mkdir -p d; echo ok > d/r.txt; ln -s /etc/shadow leak; "
                           "ln -s / root; mkfifo pipe; ln -s d dl")
    assert res.returncode == 0, log
    work = world["job"] / "work"
    files = [e["name"] for e in job_files(work)[0] if e["type"] == "file"]
    assert files == ["d/r.txt"]
    fd, _ = open_under(work, "d/r.txt")
    with os.fdopen(fd, "rb") as f:
        assert f.read() == b"ok\n"
    for bad in ("leak", "root/etc/shadow", "pipe", "dl/r.txt", "../log", "/etc/shadow", ""):
        with pytest.raises((FileNotFoundError, BadPath)):
            open_under(work, bad)


def test_paths_that_would_leak_are_refused(world):
    data, job = world["data"], world["job"]
    for kw, words in (({"data_dir": world["root"]}, "inside the data directory"),
                      ({"data_dir": Path("/")}, "inside the data directory"),
                      ({"log": job / "work" / "log"}, "the job could write it")):
        args = {"job_dir": job, "data_dir": data, "limits": FAST, "log": job / "log", **kw}
        r = run_sandboxed(["/bin/true"], **args)
        assert r.returncode == 125 and words in r.reason and "\n" not in r.reason, r


def _sleepers(job: Path) -> list[int]:
    """The job's ``sleep`` processes (their working directory is the job's work tree)."""
    w = (job / "work").stat()
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            st = os.stat(f"/proc/{pid}/cwd")
            if (st.st_dev, st.st_ino) == (w.st_dev, w.st_ino) and \
                    Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"):
                out.append(int(pid))
        except OSError:
            continue
    return out


def test_a_killed_service_leaves_no_job_behind(world):
    # the service process dies (SIGKILL) while its job runs: bwrap dies with it, and the
    # PID namespace with bwrap
    code = (f"import sys; from pathlib import Path; from shoal.service.sandbox import *; "
            f"run_sandboxed(['/bin/sh', '-c', 'sleep 1000 & sleep 1000 # {world['token']}'], "
            f"job_dir=Path({str(world['job'])!r}), data_dir=Path({str(world['data'])!r}), "
            f"limits=Limits(), log=Path({str(world['job'] / 'log')!r}))")
    (world["job"] / "work").mkdir()
    svc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while len(_sleepers(world["job"])) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_sleepers(world["job"])) == 2
    time.sleep(0.5)  # bwrap's first process in the namespace binds itself to bwrap by now
    svc.kill()
    svc.wait()
    deadline = time.monotonic() + 5
    while _leftovers(world["job"], world["token"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    # its empty control groups are removed by the next service that starts (here: a sweep)
    from shoal.service import sandbox_host

    h = sandbox_host.host()
    for parent in [p for p in [h.v2, *h.v1.values()] if p]:
        sandbox_host._sweep(parent)
        assert not os.path.exists(parent) or \
            not [n for n in os.listdir(parent) if n.startswith(f"job-{svc.pid}-")]


def test_the_next_service_kills_a_job_its_dead_predecessor_left(world):
    # a service killed while a job's sandbox is starting can leave it running (bwrap binds
    # its namespace's first process to itself only after its set-up): the job stays in its
    # control groups, and the next service to start kills it
    from shoal.service import sandbox_host

    h = sandbox_host.host()
    if h.v2 is None and not h.v1:
        pytest.skip("no writable control groups here")
    gone = subprocess.Popen(["true"])
    gone.wait()
    name = f"job-{gone.pid}-0-test{world['token'][:6]}"
    groups = [os.path.join(p, name) for p in [h.v2, *h.v1.values()] if p]
    for g in groups:
        sandbox_host._mkdir_below(os.path.dirname(g), g)
    join = "; ".join(f"echo $$ > {g}/cgroup.procs" for g in groups)
    orphan = subprocess.Popen(["/bin/sh", "-c", f"{join}; exec sleep 1000 # {world['token']}"])
    deadline = time.monotonic() + 10
    while not sandbox_host.JobCgroups._read(f"{groups[0]}/cgroup.procs").strip() and \
            time.monotonic() < deadline:
        time.sleep(0.02)
    for parent in [p for p in [h.v2, *h.v1.values()] if p]:
        sandbox_host._sweep(parent)
    assert orphan.wait(timeout=5) == -9
    assert not any(os.path.exists(g) for g in groups)


# ------------------------------------------------------- machines without writable cgroups

@pytest.fixture
def no_cgroups(monkeypatch):
    """The sandbox as on a machine where no control group can be made: rlimits only."""
    from shoal.service import sandbox_host

    h = sandbox_host._probe(cgroups=False)
    assert h.v2 is None and not h.v1
    monkeypatch.setattr(sandbox_host, "_host", h)
    return h


def test_without_cgroups_the_pid_namespace_still_kills_everything(world, no_cgroups):
    from shoal.service.sandbox import describe

    assert "memory: rlimit; processes: rlimit; CPU: rlimit" in describe()
    lim = Limits(cpu_s=60, memory_bytes=1 << 30, nprocs=64, wall_s=2, output_bytes=64 << 20)
    res, log = _raw(world, "setsid sleep 1000 & (sleep 1000 &) ; nohup sleep 1000 & sleep 1000",
                    limits=lim)
    assert res == JobResult(137, "wall time limit 2 s reached"), res
    # the fixture checks that no process is left


def test_without_cgroups_memory_and_cpu_are_rlimits(world, no_cgroups):
    lim = Limits(cpu_s=1, memory_bytes=256 << 20, nprocs=64, wall_s=30, output_bytes=64 << 20)
    res, log = _raw(world, "exec awk 'BEGIN { s = \"xxxxxxxxxxxxxxxx\"; while (1) s = s s }'",
                    limits=lim)
    assert res.returncode not in (0, 137) and res.reason is None, (res, log)
    assert world["elapsed"] < 10
    res, log = _raw(world, "while :; do :; done", limits=lim)
    assert res == JobResult(137, "CPU time limit 1 s exceeded"), (res, log)


def test_without_cgroups_a_script_job_runs_and_stops(world, no_cgroups):
    r = _job(world, COREUTILS, ["/data"])
    assert r == JobResult(0, None), (world["job"] / "log").read_text()
    lim = Limits(cpu_s=60, memory_bytes=1 << 30, nprocs=64, wall_s=60, output_bytes=64 << 20)
    r = _job(world, "head -c 100G /dev/zero > big\n", limits=lim)
    assert r == JobResult(137, "output limit 64.0 MiB exceeded"), r
