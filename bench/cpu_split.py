#!/usr/bin/env python3
"""CPU seconds per shoal process (client, head, agent, and what the agent forked: its spawn
helper and workers, "agent+") and in total, A/B over source trees.

    python bench/cpu_split.py --trees /tmp/main,. --rounds 5 -- shoal run w2.txt -j 2 \\
        --discard-output --no-progress --no-summary

Runs the command once per tree per round (trees alternating, the tree first on
``PYTHONPATH``), polls
``/proc`` every 10 ms for the CPU time of the command's long-lived descendants (the head
and the agent), and takes the total, children included, from ``RUSAGE_CHILDREN``. Prints
the median of each over the rounds, and the wall time.

CPU time, unlike wall time, stays comparable on a shared machine: when other work takes the
cores, each process waits longer but spends about the same CPU. On 2 cores a short-command
workload (W2) is bound by the CPU every process and every command spend, so the totals say
where its wall time goes; the command's own children are what is left of the total.

``--switches`` adds each role's voluntary context switches (``/proc/PID/status``): every one
is a sleep and a wake-up, and on a virtual machine a wake-up across CPUs costs far more CPU
than the system call behind it (about 20 us a round trip on the 2-core VM of issue 13,
against 2 us on one CPU), so they count as much as the Python work per message.
Standard library only.
"""

from __future__ import annotations

import argparse
import atexit
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

TCK = os.sysconf("SC_CLK_TCK")
NEUTRAL = tempfile.mkdtemp(prefix="cpu-split-")
atexit.register(os.rmdir, NEUTRAL)  # the commands run there and write nothing in it


def _table() -> dict[int, tuple[int, float]]:
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
            rest = s[s.rindex(")") + 2:].split()
            out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / TCK)
        except (OSError, ValueError, IndexError):
            pass
    return out


def _role(cmdline: str) -> str:
    if "shoal.head" in cmdline:
        return "head"
    if "shoal.agent" in cmdline:
        return "agent"
    return "other"


def _switches(pid: int) -> int:
    """Voluntary context switches of ``pid`` (its threads' included), or -1."""
    n = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        n += int(line.split()[1])
    except (OSError, ValueError):
        return -1
    return n


def measure(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """One run: CPU seconds per role, the total (children included) and the wall time;
    ``sw:ROLE``: voluntary context switches per role."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # Not in the caller's directory: `python -m shoal.head/agent` put their working
    # directory first on sys.path, and in a checkout that would import its shoal, whatever
    # the tree. Paths in the command that name files here are made absolute.
    cmd = [os.path.abspath(a) if os.path.exists(a) and not os.path.isabs(a) else a for a in cmd]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, cwd=NEUTRAL)
    seen: dict[int, list] = {}  # pid -> [cmdline, cpu, polls seen in]
    parent: dict[int, int] = {}
    while p.poll() is None:
        table = _table()
        kids = {p.pid}
        grew = True
        while grew:
            grew = False
            for pid, (ppid, _) in table.items():
                if ppid in kids and pid not in kids:
                    kids.add(pid)
                    grew = True
        for k in kids:
            if k not in table:
                continue
            try:
                with open(f"/proc/{k}/cmdline") as f:
                    cmdline = f.read().replace("\0", " ")
            except OSError:
                continue
            parent[k] = table[k][0]
            entry = seen.setdefault(k, [cmdline, 0.0, 0, 0])
            entry[2] += 1
            if cmdline:
                entry[0] = cmdline  # after exec: the real program
            entry[1] = max(entry[1], table[k][1])
            if entry[2] >= 3:  # not a command caught between spawn and exec
                entry[3] = max(entry[3], _switches(k))
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"wall": wall, "total": (after.ru_utime + after.ru_stime)
           - (before.ru_utime + before.ru_stime), "client": 0.0, "head": 0.0, "agent": 0.0}
    out["agent+"] = 0.0
    for role in ("client", "head", "agent", "agent+"):
        out["sw:" + role] = 0.0
    for pid, (cmdline, cpu, polls, switches) in seen.items():
        role = "client" if pid == p.pid else _role(cmdline)
        if polls < 3 and pid != p.pid:
            role = "other"  # a command caught between its spawn and its exec
        if role == "agent" and _role(seen.get(parent.get(pid, 0), [""])[0]) == "agent":
            role = "agent+"  # forked by the agent: its spawn helper and its workers
        if role != "other":
            out[role] += cpu
            out["sw:" + role] += switches
    if p.returncode != 0:
        print(f"warning: exit status {p.returncode}", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trees", required=True, help="comma-separated source trees (PYTHONPATH)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--switches", action="store_true",
                    help="also each role's voluntary context switches (sleeps and wake-ups)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command to run")
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("give the command after --")
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    runs: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for t in trees:
            extra = os.environ.get("PYTHONPATH")
            env = dict(os.environ, PYTHONPATH=t if not extra else t + os.pathsep + extra)
            runs[t].append(measure(cmd, env))
    keys = ["client", "head", "agent", "agent+", "total", "wall"]
    if args.switches:
        keys += ["sw:client", "sw:head", "sw:agent", "sw:agent+"]
    print(f"median of {args.rounds} alternating rounds, CPU seconds (wall: seconds); "
          f"load {os.getloadavg()[0]:.1f}")
    print("| tree | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for t in trees:
        vals = [statistics.median(r[k] for r in runs[t]) for k in keys]
        print(f"| {t} | " + " | ".join(f"{v:.0f}" if k.startswith("sw:") else f"{v:.2f}"
                                        for k, v in zip(keys, vals, strict=True)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
