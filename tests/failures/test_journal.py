"""The journal: kill -9 of a whole `shoal run --journal` run, then the same command again.

Each line appends "NUMBER TIME" to starts.txt when it starts and to ends.txt when it ends.
After the rerun every line has ended; a line that had ended before the kill is not run
again, except within JOURNAL_LAG s before the kill (the journal commits in batches, off
the hot path: a completion that was not yet committed is legitimately redone)."""

from __future__ import annotations

import collections
import os
import shutil
import time

from .harness import PY, Ledger, agent_dirs, cmdline, freeze_and_kill, freeze_tree, wait_for

JOURNAL_LAG = 1.0   # seconds of completions a hard kill may lose from the journal
N = 40


def _start_run(c, taskfile, journal):
    argv = [PY, "-m", "shoal.cli.main", "run", str(taskfile), "-j", "2", "--journal", str(journal),
            "--no-progress", "--no-summary", "--discard-output"]
    p = c._start("client", f"shoal-run-{len(c.clients)}", argv)
    c.clients.append(p)
    return p


def _rows(path) -> list[tuple[int, float]]:
    return [(int(a), float(b)) for a, b in (ln.split()[:2] for ln in Ledger(str(path)).lines())]


def test_killed_run_resumes_from_its_journal(make_cluster, tracker, tmp_path):
    c = make_cluster(heartbeat_timeout=None)  # only for its directory and process bookkeeping
    starts, ends = tmp_path / "starts.txt", tmp_path / "ends.txt"
    taskfile = tmp_path / "tasks.txt"
    taskfile.write_text("# a task file\n" + "".join(
        f"echo {i} $(date +%s.%N) >> {starts}; sleep 0.25; echo {i} $(date +%s.%N) >> {ends}\n"
        for i in range(N)))
    line_of = {i: i + 2 for i in range(N)}  # line numbers (the comment is line 1)
    journal = tmp_path / "run.db"
    first = _start_run(c, taskfile, journal)
    wait_for(lambda: len(Ledger(str(ends)).lines()) >= N // 3, 120, 0.02, f"{N // 3} lines done")
    # kill -9 of the whole run at once: the client, its head and agent, every command
    t_kill = time.time()
    tree = freeze_tree(first.pid)  # a command spawned meanwhile is frozen too
    rundirs = _rundirs(tree)
    freeze_and_kill(tree)
    first.wait(10)
    ended_before = dict(_rows(ends))
    started_before = {i for i, _ in _rows(starts)}
    running_at_kill = started_before - set(ended_before)
    assert ended_before and len(ended_before) < N, "the kill came too late to test a resume"
    assert not tracker.leftovers(wait=5), "a killed run left processes behind"
    for d in rundirs:  # what the killed local head and agent could not remove
        shutil.rmtree(d, ignore_errors=True)
    assert os.path.exists(journal), "no journal file"

    second = _start_run(c, taskfile, journal)
    rc = second.wait(120)
    assert rc == 0, f"the resumed run failed ({rc}):\n{second.output()}"
    ends_count = collections.Counter(i for i, _ in _rows(ends))
    assert set(ends_count) == set(range(N)), f"lines never done: {set(range(N)) - set(ends_count)}"
    rerun = {i for i in ended_before if ends_count[i] > 1}
    lagging = {i for i, t in ended_before.items() if t >= t_kill - JOURNAL_LAG}
    assert not rerun - lagging, (
        f"lines {sorted(line_of[i] for i in rerun - lagging)} had finished before the kill "
        f"and ran again")
    starts_count = collections.Counter(i for i, _ in _rows(starts))
    twice = {i for i, n in starts_count.items() if n > 1}
    assert twice <= running_at_kill | lagging, sorted(twice - running_at_kill - lagging)
    assert not any(n > 2 for n in starts_count.values())

    # and a third run of a finished journal runs nothing
    before = len(Ledger(str(starts)).lines())
    third = _start_run(c, taskfile, journal)
    assert third.wait(60) == 0, third.output()
    assert len(Ledger(str(starts)).lines()) == before, "a finished run was run again"


def _rundirs(pids) -> set[str]:
    """What a kill -9 of all of a run leaves behind: the local runtime's directory (named
    on the head's and agent's command lines) and the agent's own (harness.agent_dirs)."""
    out = agent_dirs(pids)
    for pid in pids:
        argv = cmdline(pid).split()
        if "--connection" in argv and argv.index("--connection") + 1 < len(argv):
            path = argv[argv.index("--connection") + 1]
            if os.path.basename(os.path.dirname(path)).startswith("shoal-run-"):
                out.add(os.path.dirname(path))
    return out


PROG = '''
import os, sys, time
from shoal import futures

LEDGER = sys.argv[1]

def task(i):
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{i} {time.time():.6f}\\n".encode())
    os.close(fd)
    time.sleep(0.2)
    return i * i

if __name__ == "__main__":
    results = list(futures.map(task, range(%d)))
    assert results == [i * i for i in range(%d)], results
    print("all", len(results), flush=True)
'''


def test_killed_python_program_resumes_from_its_journal(make_cluster, tracker, tmp_path):
    # python -m shoal --journal J prog.py, kill -9 of the whole run, then the same again:
    # every result comes back (those finished before from the journal, not run again)
    n = 30
    c = make_cluster(heartbeat_timeout=None)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG % (n, n))
    ledger = tmp_path / "ran.txt"
    journal = tmp_path / "prog.db"

    def start(k):
        p = c._start("client", f"prog-{k}", [PY, "-m", "shoal", "-n", "2", "--journal",
                                            str(journal), str(prog), str(ledger)])
        c.clients.append(p)
        return p

    first = start(0)
    wait_for(lambda: len(Ledger(str(ledger)).lines()) >= n // 3 + 2, 120, 0.02,
             f"{n // 3} tasks done")
    tree = freeze_tree(first.pid)  # a command spawned meanwhile is frozen too
    rundirs = _rundirs(tree)
    freeze_and_kill(tree)
    first.wait(10)
    t_kill = time.time()
    before = _rows(ledger)
    assert len(before) < n, "the kill came too late to test a resume"
    assert not tracker.leftovers(wait=5), "a killed run left processes behind"
    for d in rundirs:
        shutil.rmtree(d, ignore_errors=True)
    second = start(1)
    assert second.wait(120) == 0, second.output()
    assert f"all {n}" in second.output()
    counts = collections.Counter(i for i, _ in _rows(ledger))
    assert set(counts) == set(range(n))
    # a task that ran before the kill and ran again: only those still running at the kill
    # (started within its last 0.2 s + JOURNAL_LAG)
    again = {i for i, c_ in counts.items() if c_ > 1}
    recent = {i for i, t in before if t >= t_kill - 0.2 - JOURNAL_LAG - 0.5}
    assert again <= recent, sorted(again - recent)
