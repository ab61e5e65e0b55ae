"""Exact cancel and running(), on a real runtime, in each place a task can wait.

``cancel()`` is True exactly when the task had not started, and then it never runs; False
when it started, and then it runs to its end. Each test causes the place for real: the
head's TASKS of the same turn (cancel right after submit), a worker's own queue behind a
long task (prefetch of a function known to be short), and both at random under load.
Every task appends its id to a file when it runs: the file says what really ran.
Also: sub-tasks run the executor's initializer.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import random
import threading
import time
import uuid

import shoal
from shoal import futures

_STATE: dict[str, object] = {}


def mark(path, i, t=0.0):
    """Run: append ``i`` to ``path`` (one line per run), sleep ``t``, return ``i``."""
    with open(path, "a") as f:
        f.write(f"{i}\n")
    if t:
        time.sleep(t)
    return i


def ran(path) -> list[str]:
    try:
        with open(path) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def warm(ex, path, n=40):
    """Give ``mark`` a short run-time history: the agent then prefetches it deep."""
    list(ex.map(mark, [path] * n, range(-n, 0)))
    time.sleep(0.1)


def test_cancel_right_after_submit_is_exact(tmp_path):
    # the cancel reaches the head in the turn that dispatched the task (its TASKS message
    # not sent yet): before, the agent got the CANCEL first and answered "not here"
    path = str(tmp_path / "ran")
    with shoal.Executor(max_workers=2) as ex:
        warm(ex, path)
        answers, cancelled = [], []
        for rep in range(8):
            busy = [ex.submit(mark, path, f"busy{rep}.{k}", 0.3) for k in range(2)]
            queued = [ex.submit(mark, path, f"q{rep}.{k}") for k in range(6)]
            time.sleep(rep % 4 * 0.0005)  # at moments around the head's dispatch
            answers.append(queued[-1].cancel())
            cancelled.append(f"q{rep}.5")
            cf.wait(busy + queued, timeout=30)
            assert [f.result() for f in queued[:-1]] == [f"q{rep}.{k}" for k in range(5)]
    assert answers == [True] * 8
    assert not set(cancelled) & set(ran(path))


def test_cancel_in_a_worker_queue_never_runs(tmp_path):
    # one worker: a long task of a function known to be short, and ten behind it in the
    # worker's own queue; before, the five cancelled ones still ran (dropped by guess)
    path = str(tmp_path / "ran")
    with shoal.Executor(max_workers=1) as ex:
        warm(ex, path)
        long = ex.submit(mark, path, "long", 1.0)
        behind = [ex.submit(mark, path, f"b{k}") for k in range(10)]
        time.sleep(0.4)  # all sent to the worker: the long one runs, the rest wait there
        assert long.running() and not any(f.running() for f in behind)
        t0 = time.monotonic()
        assert [f.cancel() for f in behind[5:]] == [True] * 5
        assert time.monotonic() - t0 < 0.5  # answered without waiting for the long task
        assert long.result(30) == "long" and [f.result(30) for f in behind[:5]] == [
            f"b{k}" for k in range(5)]
        assert all(f.cancelled() for f in behind[5:])
    assert [x for x in ran(path) if not x.startswith("-")] == ["long"] + [f"b{k}" for k in range(5)]


def test_cancel_under_load_loses_nothing_and_runs_no_cancelled_task(tmp_path):
    path = str(tmp_path / "ran")
    rng = random.Random(12)
    with shoal.Executor(max_workers=2) as ex:
        warm(ex, path)
        futs: dict[int, cf.Future] = {}
        answers: dict[int, bool] = {}
        lock = threading.Lock()

        def canceller():
            r = random.Random(7)
            for _ in range(200):
                with lock:
                    keys = list(futs)
                if keys:
                    k = r.choice(keys)
                    answers.setdefault(k, futs[k].cancel())
                time.sleep(r.random() * 0.002)

        t = threading.Thread(target=canceller)
        t.start()
        for i in range(600):
            f = ex.submit(mark, path, i, rng.choice((0, 0, 0, 0.001, 0.003)))
            with lock:
                futs[i] = f
            if i % 50 == 0:
                time.sleep(0.01)
        t.join(60)
        cf.wait(list(futs.values()), timeout=60)
    runs = [int(x) for x in ran(path) if not x.startswith("-")]
    assert len(runs) == len(set(runs))  # nothing ran twice
    for i, f in futs.items():
        assert f.done()
        if f.cancelled():
            assert i not in runs
        else:
            assert f.result() == i and i in runs
        if i in answers:
            assert answers[i] == f.cancelled()
    assert sum(answers.values()) > 5 and not all(answers.values())  # both cases happened


# ---- sub-tasks run the executor's initializer ------------------------------------------------
def init(token):
    _STATE["token"] = token


def read_init_and_pid(t):
    time.sleep(t)
    return _STATE.get("token"), os.getpid()


def spawn_readers(n):
    subs = [futures.submit(read_init_and_pid, 0.2) for _ in range(n)]
    deeper = futures.submit(spawn_leaf)
    return [f.result() for f in subs] + deeper.result(), os.getpid()


def spawn_leaf():
    return [futures.submit(read_init_and_pid, 0.0).result()]


def test_sub_tasks_run_the_initializer_first():
    token = uuid.uuid4().hex
    with shoal.Executor(max_workers=2, initializer=init, initargs=(token,)) as ex:
        got, parent = ex.submit(spawn_readers, 8).result(60)
    assert [v for v, _ in got] == [token] * 9
    assert {p for _, p in got} - {parent}  # some ran in the worker that ran no task of ours
