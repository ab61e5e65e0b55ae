#!/usr/bin/env python3
"""The spawn floor: what starting and reaping one ``/bin/true`` costs on this machine, and
what shoal's agent adds above it (issue 13).

    PYTHONPATH=. python bench/spawn_floor.py [-n 2000] [-P 2] [--rounds 3] [--fds 0,1200]

Variants, alternated round by round (the machine is shared: medians are printed):

- ``c``: a C loop of posix_spawn + wait (glibc's posix_spawn is clone(CLONE_VM|CLONE_VFORK)
  + execve), compiled here with cc when there is one: the kernel's and the loader's floor.
- ``py``: the same loop in Python (``os.posix_spawn`` + ``os.wait``).
- ``pidfd``: the Python loop reaping as the agent does (a pidfd per command in an epoll
  set, then waitpid).
- ``sigchld``: the Python loop reaping on SIGCHLD (its wake-up fd in an epoll set, then
  ``waitid(P_ALL)`` until none is left): no descriptor per command.
- ``agent``: shoal's agent launch path without head and client: ``launcher.spawn`` of a
  ``/bin/sh -c`` spec as ``shoal run`` sends it (a task-file line), stdout/stderr
  discarded, reaped as the agent reaps, each result pickled as the agent does.
- ``agent-capture``: the same with stdout/stderr captured (the Executor's default).
- ``helper``, ``helper-capture``: the same through the agent's spawn helper
  (``shoal.agent.spawner``), this process in the agent's place: every command handed at
  once, reports received; the helper's CPU is in the children's column.

Each keeps ``-P`` commands running (like ``xargs -P``). ``--fds N`` holds N extra open
descriptors in the parent while it spawns (an agent with N/3 commands running holds about
that many: a pidfd and two memfds each): the kernel copies the descriptor table at every
spawn and the child closes the close-on-exec ones at exec.

Per command: wall time, the parent's CPU and the children's CPU (``RUSAGE_CHILDREN``).

``--wake`` measures instead what one sleep and wake-up costs: two processes passing a byte
back and forth over pipes, free to run on any CPU and then both pinned to one. Every
message between shoal's processes, every command's exit and every ``posix_spawn`` (whose
parent sleeps until the child has exec'd) is such a wake-up; on a virtual machine one
across CPUs costs tens of microseconds of CPU (an inter-processor interrupt, an idle CPU
halted and woken), one on the same CPU a few.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

C_SOURCE = r"""
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
extern char **environ;
int main(int argc, char **argv) {
    int n = atoi(argv[1]), par = atoi(argv[2]);
    char *args[] = {"/bin/true", NULL};
    int running = 0, started = 0, st;
    while (started < n || running) {
        while (running < par && started < n) {
            pid_t pid;
            if (posix_spawn(&pid, "/bin/true", NULL, NULL, args, environ)) { perror("posix_spawn"); return 1; }
            running++; started++;
        }
        wait(&st); running--;
    }
    return 0;
}
"""


def build_c(workdir: str) -> str | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src = os.path.join(workdir, "floor.c")
    exe = os.path.join(workdir, "floor")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    if subprocess.run([cc, "-O2", "-o", exe, src], capture_output=True).returncode != 0:
        return None
    return exe


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_c(exe: str, n: int, par: int) -> tuple[float, float, float]:
    k0, t0 = _cpu_children(), time.perf_counter()
    subprocess.run([exe, str(n), str(par)], check=True)
    wall = time.perf_counter() - t0
    total = _cpu_children() - k0
    return wall, float("nan"), total  # the C parent's own CPU is inside its children's


def run_py(n: int, par: int) -> tuple[float, float, float]:
    env = dict(os.environ)
    k0, s0, t0 = _cpu_children(), _cpu_self(), time.perf_counter()
    running = started = 0
    while started < n or running:
        while running < par and started < n:
            os.posix_spawn("/bin/true", ["/bin/true"], env)
            running += 1
            started += 1
        os.wait()
        running -= 1
    return time.perf_counter() - t0, _cpu_self() - s0, _cpu_children() - k0


def run_pidfd(n: int, par: int) -> tuple[float, float, float]:
    """Reaping as the agent does: a pidfd per command in an epoll set, then waitpid."""
    env = dict(os.environ)
    ep = select.epoll()
    pids: dict[int, int] = {}
    k0, s0, t0 = _cpu_children(), _cpu_self(), time.perf_counter()
    started = 0
    while started < n or pids:
        while len(pids) < par and started < n:
            pid = os.posix_spawn("/bin/true", ["/bin/true"], env, setsid=True)
            fd = os.pidfd_open(pid)
            pids[fd] = pid
            ep.register(fd, select.EPOLLIN)
            started += 1
        for fd, _ in ep.poll(1.0):
            os.waitpid(pids.pop(fd), 0)
            ep.unregister(fd)
            os.close(fd)
    ep.close()
    return time.perf_counter() - t0, _cpu_self() - s0, _cpu_children() - k0


def run_sigchld(n: int, par: int) -> tuple[float, float, float]:
    """Reaping on SIGCHLD: the signal's wake-up fd in an epoll set, then waitid(P_ALL) until
    no child is left to reap (no descriptor per command)."""
    import signal

    env = dict(os.environ)
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    old = signal.signal(signal.SIGCHLD, lambda *_: None)
    ep = select.epoll()
    ep.register(r, select.EPOLLIN)
    running = 0
    k0, s0, t0 = _cpu_children(), _cpu_self(), time.perf_counter()
    started = 0
    try:
        while started < n or running:
            while running < par and started < n:
                os.posix_spawn("/bin/true", ["/bin/true"], env, setsid=True)
                running += 1
                started += 1
            if ep.poll(1.0):
                try:
                    os.read(r, 512)
                except BlockingIOError:
                    pass
                while running:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG)
                    if info is None:
                        break
                    running -= 1
    finally:
        signal.signal(signal.SIGCHLD, old)
        signal.set_wakeup_fd(old_fd)
        ep.close()
        os.close(r)
        os.close(w)
    return time.perf_counter() - t0, _cpu_self() - s0, _cpu_children() - k0


def run_agent(n: int, par: int, capture: bool) -> tuple[float, float, float]:
    """The agent's own path: spawn, an epoll set of exits, reap, outcome (pickled)."""
    from shoal.agent import launcher

    env = dict(os.environ)
    spec: dict = {"argv": ["/bin/sh", "-c", "/bin/true 1"]}
    if not capture:
        spec["stdout"] = spec["stderr"] = "devnull"
    ep = select.epoll()
    runs: dict[int, launcher.Running] = {}
    k0, s0, t0 = _cpu_children(), _cpu_self(), time.perf_counter()
    started = 0
    while started < n or runs:
        while len(runs) < par and started < n:
            run = launcher.spawn(started, spec, 1, env)
            fd = os.pidfd_open(run.pid)
            runs[fd] = run
            ep.register(fd, select.EPOLLIN)
            started += 1
        for fd, _ in ep.poll(1.0):
            run = runs[fd]
            if launcher.reap(run):
                ep.unregister(fd)
                os.close(fd)
                del runs[fd]
                launcher.outcome(run)
    ep.close()
    return time.perf_counter() - t0, _cpu_self() - s0, _cpu_children() - k0


def run_helper(n: int, par: int, capture: bool) -> tuple[float, float, float]:
    """The agent's path since the spawn helper: this process as the agent (hand-offs and
    reports, all n handed at once), the helper running ``par`` at a time. Its CPU is in
    the children's (it is reaped at the end, its commands with it)."""
    from shoal.agent.spawner import Spawner

    spec: dict = {"argv": ["/bin/sh", "-c", "/bin/true 1"]}
    if not capture:
        spec["stdout"] = spec["stderr"] = "devnull"
    k0, s0, t0 = _cpu_children(), _cpu_self(), time.perf_counter()
    sp = Spawner()
    sp.config(dict(os.environ), None)
    sp.cap(par)
    for i in range(n):
        sp.run(i + 1, i, spec, 1)
    sp.flush()
    done = 0
    while done < n:
        select.select([sp.fileno()], [], [], 1.0)
        done += len(sp.receive())
    wall = time.perf_counter() - t0
    sp.close(5.0)
    return wall, _cpu_self() - s0, _cpu_children() - k0


def wake_cost(n: int) -> None:
    """Round trips of one byte between two processes: wall and CPU per round trip."""
    for label, cpus in (("any CPU", None), ("one CPU", {min(os.sched_getaffinity(0))})):
        old = os.sched_getaffinity(0)
        if cpus:
            os.sched_setaffinity(0, cpus)
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        pid = os.fork()
        if pid == 0:
            for _ in range(n):
                os.read(r1, 1)
                os.write(w2, b"x")
            os._exit(0)
        s0, t0 = _cpu_self(), time.perf_counter()
        for _ in range(n):
            os.write(w1, b"x")
            os.read(r2, 1)
        wall, cpu = time.perf_counter() - t0, _cpu_self() - s0
        os.waitpid(pid, 0)
        for fd in (r1, w1, r2, w2):
            os.close(fd)
        os.sched_setaffinity(0, old)
        print(f"{label}: {wall / n * 1e6:.1f} us wall, {cpu / n * 1e6:.1f} us of this "
              "process's CPU per round trip (a sleep and a wake-up each side)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=2000, help="commands per measurement")
    ap.add_argument("-P", type=int, default=2, help="commands kept running at once")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fds", default="0", help="extra open descriptors, comma-separated")
    ap.add_argument("--variants",
                    default="c,py,pidfd,sigchld,agent,agent-capture,helper,helper-capture")
    ap.add_argument("--wake", action="store_true",
                    help="measure the cost of a sleep and wake-up instead (module docstring)")
    args = ap.parse_args()
    if args.wake:
        wake_cost(args.n * 10)
        return 0
    work = tempfile.mkdtemp(prefix="spawn-floor-")
    variants = [v for v in args.variants.split(",") if v]
    exe = build_c(work) if "c" in variants else None
    if "c" in variants and exe is None:
        print("no C compiler: variant c skipped", file=sys.stderr)
        variants.remove("c")
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):
        for nfd in (int(x) for x in args.fds.split(",")):
            held = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(nfd)]
            try:
                for v in variants:
                    if v == "c":
                        r = run_c(exe, args.n, args.P)
                    elif v == "py":
                        r = run_py(args.n, args.P)
                    elif v == "pidfd":
                        r = run_pidfd(args.n, args.P)
                    elif v == "sigchld":
                        r = run_sigchld(args.n, args.P)
                    elif v.startswith("helper"):
                        r = run_helper(args.n, args.P, v == "helper-capture")
                    else:
                        r = run_agent(args.n, args.P, v == "agent-capture")
                    results.setdefault((v, nfd), []).append(r)
            finally:
                for fd in held:
                    os.close(fd)
    shutil.rmtree(work, ignore_errors=True)
    print(f"{args.n} x /bin/true, {args.P} at once, median of {args.rounds} alternating rounds; "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'variant':<14} {'extra fds':>9} {'cmds/s':>8} {'wall ms':>8} {'parent CPU ms':>14} "
          f"{'children CPU ms':>16}")
    for (v, nfd), rs in results.items():
        wall = statistics.median(r[0] for r in rs)
        parent = statistics.median(r[1] for r in rs)
        kids = statistics.median(r[2] for r in rs)
        ms = 1e3 / args.n
        par = "-" if parent != parent else f"{parent * ms:.3f}"
        print(f"{v:<14} {nfd:>9} {args.n / wall:>8.0f} {wall * ms:>8.3f} {par:>14} {kids * ms:>16.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
