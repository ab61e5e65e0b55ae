"""concurrent.futures conformance: each documented behaviour of Executor, Future, wait,
as_completed and shutdown, checked on shoal's Executor and on ProcessPoolExecutor by the
same test (parametrized over both), so the two cannot drift apart silently.

Where shoal differs on purpose, the test says so and checks shoal's side: a lost worker
fails its task with TaskLost (a BrokenProcessPool) and the executor goes on; a result that
cannot be unpickled fails that future only.

``cancel()`` is exact wherever a task waits (tests/test_cancel_exact.py causes each place
for real); ``running()`` is True once the task started (ProcessPoolExecutor says so once a
task is in its call queue, a little earlier).
"""

from __future__ import annotations

import concurrent.futures as cf
import gc
import logging
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from concurrent.futures.process import BrokenProcessPool

import pytest

import shoal
from shoal.task.errors import InitializerError, RemoteError, TaskLost
from shoal.task.future import ShoalFuture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ["shoal", "process"]


def make(kind: str, max_workers: int = 2, **kwargs) -> cf.Executor:
    if kind == "shoal":
        return shoal.Executor(max_workers=max_workers, **kwargs)
    if kind == "thread":
        return cf.ThreadPoolExecutor(max_workers=max_workers, **kwargs)
    return cf.ProcessPoolExecutor(max_workers=max_workers, **kwargs)


@pytest.fixture(scope="module", params=KINDS)
def ex(request):
    with make(request.param) as executor:
        yield executor


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


# ---- functions the workers run (importable by name) --------------------------------------
def mul(x, y):
    return x * y


def capture(*args, **kwargs):
    return args, kwargs


def fail(msg):
    raise ValueError(msg)


def nap(t, value=None):
    time.sleep(t)
    return value


def queued_nap(t, value=None):
    time.sleep(t)
    return value


def append(proxy, value):
    proxy.append(value)
    return value


_STATE = {"init": None}


def init(value):
    _STATE["init"] = value


def read_init():
    return _STATE["init"]


def init_fail():
    raise ValueError("error in initializer")


class Obj:
    def method(self):
        return 1


def make_obj(_):
    return Obj()


class ExitOnLoad:
    """Unpickling it raises SystemExit (in the caller, for a result)."""

    def __reduce__(self):
        return (sys.exit, (3,))


def exit_on_load():
    return ExitOnLoad()


# ---- Executor.submit and Future -----------------------------------------------------------
def test_submit_returns_a_future_with_the_value(ex):
    f = ex.submit(mul, 6, y=7)
    assert isinstance(f, cf.Future)
    assert f.result(30) == 42 and f.done() and not f.cancelled() and f.exception() is None
    assert ex.submit(capture, 1, self=2, fn=3).result(30) == ((1,), {"self": 2, "fn": 3})
    with pytest.raises(TypeError):
        ex.submit(fn=capture, arg=1)


def test_exception_reraises_with_its_type(ex):
    f = ex.submit(fail, "boom")
    with pytest.raises(ValueError, match="boom"):
        f.result(30)
    assert isinstance(f.exception(), ValueError) and f.done()


def test_result_timeout_raises_timeout_error(ex):
    f = ex.submit(nap, 1.0, "late")
    with pytest.raises(cf.TimeoutError):
        f.result(timeout=0.05)
    with pytest.raises(TimeoutError):
        f.exception(timeout=0)
    assert f.result(30) == "late"


def test_done_callbacks(ex, caplog):
    seen = []
    ev = threading.Event()
    f = ex.submit(mul, 2, 3)
    f.add_done_callback(lambda g: seen.append(("first", g.result())))
    f.add_done_callback(lambda g: (_ for _ in ()).throw(RuntimeError("in callback")))
    f.add_done_callback(lambda g: (seen.append(("last", g is f)), ev.set()))
    assert ev.wait(30)
    assert seen == [("first", 6), ("last", True)]  # in order; a raising one is skipped
    later = []
    f.add_done_callback(later.append)  # on a done future: called at once, here
    assert later == [f]
    assert any("exception calling callback" in r.getMessage() for r in caplog.records)


def test_cancel_semantics(ex):
    done = ex.submit(mul, 1, 1)
    done.result(30)
    assert done.cancel() is False and not done.cancelled()
    # fill both workers, then a queued one can be cancelled (with shoal, short tasks of a
    # function with a history are prefetched deep into the workers' queues: the cancel
    # reaches them there, right after submit as a moment later)
    busy = [ex.submit(nap, 1.0) for _ in range(2)]
    queued = [ex.submit(nap, 0.0, i) for i in range(20)]
    called = []
    queued[-1].add_done_callback(called.append)
    assert queued[-1].cancel() is True
    assert queued[-1].cancelled() and queued[-1].done()
    with pytest.raises(cf.CancelledError):
        queued[-1].result()
    with pytest.raises(cf.CancelledError):
        queued[-1].exception()
    assert called == [queued[-1]]
    late = []
    queued[-1].add_done_callback(late.append)  # on a cancelled future: called at once
    assert late == [queued[-1]]
    assert queued[-1].cancel() is True  # again: still True
    assert [f.result(30) for f in queued[:-1]] == list(range(19))
    cf.wait(busy)
    time.sleep(0.3)  # the workers' queues are empty again
    busy = [ex.submit(nap, 1.0) for _ in range(2)]
    queued = [ex.submit(nap, 0.0, i) for i in range(20)]
    time.sleep(0.3)  # now in the agent and the workers' queues
    assert [f.cancel() for f in queued[10:]] == [True] * 10
    assert [f.result(30) for f in queued[:10]] == list(range(10))
    assert all(f.cancelled() for f in queued[10:])
    cf.wait(busy)


def test_running_future_cannot_be_cancelled(ex):
    f = ex.submit(nap, 1.0, "ran")
    deadline = time.monotonic() + 20
    while not f.running() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert f.running() and not f.done()
    assert f.cancel() is False and not f.cancelled()
    assert f.running()
    assert f.result(30) == "ran" and not f.running() and f.done()


def test_set_running_or_notify_cancel():
    # for code that drives futures itself: shoal's future behaves as the stdlib's
    for g in (cf.Future(), ShoalFuture(0, None)):
        assert g.set_running_or_notify_cancel() is True and g.running()
        assert g.cancel() is False
        with pytest.raises(RuntimeError, match="unexpected state"):
            g.set_running_or_notify_cancel()
        g.set_result(1)
        assert not g.running() and g.result() == 1
    for g in (cf.Future(), ShoalFuture(0, None)):
        assert g.cancel() and g.set_running_or_notify_cancel() is False and g.cancelled()


def test_cancel_from_several_threads_at_once(ex):
    busy = [ex.submit(nap, 0.5) for _ in range(2)]
    queued = [ex.submit(nap, 0.0, i) for i in range(12)]
    target = queued[-1]
    calls = []
    target.add_done_callback(calls.append)
    answers = []
    start = threading.Barrier(4)

    def cancel():
        start.wait(10)
        answers.append(target.cancel())

    threads = [threading.Thread(target=cancel) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == [True] * 4 and calls == [target]  # one cancel, one callback call
    assert [f.result(30) for f in queued[:-1]] == list(range(11))
    cf.wait(busy)


# ---- map ------------------------------------------------------------------------------------
def test_map_order_shortest_iterable_and_chunksize(ex):
    assert list(ex.map(mul, range(10), range(10))) == [i * i for i in range(10)]
    assert list(ex.map(mul, range(10), range(3))) == [0, 1, 4]
    assert list(ex.map(mul, range(25), range(25), chunksize=4)) == [i * i for i in range(25)]
    assert list(ex.map(mul, [], [])) == []


def test_map_raises_at_the_failing_item(ex):
    it = ex.map(divmod, [1, 1, 1, 1], [2, 3, 0, 5])
    assert next(it) == (0, 1) and next(it) == (0, 1)
    with pytest.raises(ZeroDivisionError):
        next(it)


def test_map_collects_its_iterables_at_once(ex):
    consumed = []

    def items():
        for i in range(4):
            consumed.append(i)
            yield i

    it = ex.map(mul, items(), items())
    assert consumed == [0, 0, 1, 1, 2, 2, 3, 3]  # before the first next()
    assert list(it) == [0, 1, 4, 9]


def test_map_timeout_counts_from_the_call(ex):
    t0 = time.monotonic()
    it = ex.map(nap, [1.5], timeout=0.5)
    time.sleep(0.6)  # the deadline passes while the caller does other things
    with pytest.raises(cf.TimeoutError):
        next(it)
    assert time.monotonic() - t0 < 1.4


def test_map_holds_no_result_it_handed_out(ex):
    for obj in ex.map(make_obj, range(6)):
        ref = weakref.ref(obj)
        del obj
        gc.collect()
        assert ref() is None


def test_finished_task_holds_no_callable(ex):
    obj = Obj()
    gone = threading.Event()
    ref = weakref.ref(obj, lambda _: gone.set())
    assert ex.submit(obj.method).result(30) == 1
    del obj
    gc.collect()
    assert gone.wait(10), f"{ref()} still referenced"


# ---- wait and as_completed -------------------------------------------------------------------
def test_wait_return_when(ex):
    fast, slow = ex.submit(mul, 2, 21), ex.submit(nap, 1.0)
    done, not_done = cf.wait([fast, slow], return_when=cf.FIRST_COMPLETED)
    assert done == {fast} and not_done == {slow}
    bad, slow2 = ex.submit(fail, "x"), ex.submit(nap, 1.5)
    done, not_done = cf.wait([bad, slow2], return_when=cf.FIRST_EXCEPTION)
    assert done == {bad} and not_done == {slow2}
    done, not_done = cf.wait([slow, slow2], timeout=30, return_when=cf.ALL_COMPLETED)
    assert done == {slow, slow2} and not not_done
    f = ex.submit(nap, 1.0)
    done, not_done = cf.wait([f], timeout=0.05)
    assert not done and not_done == {f}
    f.result(30)


def test_as_completed_order_duplicates_and_timeout(ex):
    slow, fast = ex.submit(nap, 0.6, "slow"), ex.submit(nap, 0.0, "fast")
    assert [f.result() for f in cf.as_completed([slow, fast, fast], timeout=30)] == ["fast", "slow"]
    pending = ex.submit(nap, 1.0)
    with pytest.raises(cf.TimeoutError):
        for _ in cf.as_completed([pending], timeout=0.05):
            pass
    pending.result(30)


def test_first_exception_without_one_waits_for_all(ex):
    a, b = ex.submit(nap, 0.1, 1), ex.submit(nap, 0.5, 2)
    done, not_done = cf.wait([a, b], timeout=30, return_when=cf.FIRST_EXCEPTION)
    assert done == {a, b} and not not_done  # no exception: as ALL_COMPLETED


def test_as_completed_yields_finished_futures_first(ex):
    finished = ex.submit(mul, 2, 2)
    finished.result(30)
    slow = ex.submit(nap, 0.5, "slow")
    it = cf.as_completed([slow, finished], timeout=30)
    assert next(it) is finished and next(it) is slow


# ---- use from several threads --------------------------------------------------------------
def test_submit_and_wait_from_several_threads(ex):
    results: dict[int, list[int]] = {}

    def client(k):
        futs = [ex.submit(mul, k, i) for i in range(20)]
        results[k] = [f.result(60) for f in cf.as_completed(futs)]
        results[k].sort()
        results[k].extend(ex.map(mul, [k] * 5, range(5)))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {k: sorted(k * i for i in range(20)) + [k * i for i in range(5)]
                       for k in range(4)}


# ---- shutdown ---------------------------------------------------------------------------------
def test_shutdown_waits_and_refuses_new_tasks(kind):
    ex = make(kind)
    futs = [ex.submit(nap, 0.2, i) for i in range(6)]
    ex.shutdown(wait=True)
    assert all(f.done() for f in futs) and [f.result() for f in futs] == list(range(6))
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        ex.submit(mul, 1, 1)
    ex.shutdown()  # again: nothing happens


def test_shutdown_cancel_futures(kind):
    ex = make(kind)
    futs = [ex.submit(nap, 0.1) for _ in range(30)]
    ex.shutdown(cancel_futures=True)
    cancelled = [f for f in futs if f.cancelled()]
    others = [f for f in futs if not f.cancelled()]
    assert len(cancelled) > 10 and others  # what had started finished, the rest did not run
    assert all(f.done() and f.exception() is None for f in others)


def test_shutdown_without_wait_returns_at_once_and_work_finishes(kind):
    ex = make(kind)
    first = ex.submit(nap, 0.2)
    first.result(30)  # workers up
    f = ex.submit(nap, 1.0, "done")
    t0 = time.monotonic()
    ex.shutdown(wait=False)
    assert time.monotonic() - t0 < 0.8
    with pytest.raises(RuntimeError):
        ex.submit(mul, 1, 1)
    assert f.result(30) == "done"
    ex.shutdown(wait=True)  # then a waiting one returns once all is done


def test_context_manager_shuts_down(kind):
    with make(kind) as ex:
        f = ex.submit(nap, 0.2, "x")
    assert f.done() and f.result() == "x"
    with pytest.raises(RuntimeError):
        ex.submit(mul, 1, 1)


def run_script(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


FACTORY = {"shoal": "from shoal import Executor as E",
           "process": "from concurrent.futures import ProcessPoolExecutor as E",
           "thread": "from concurrent.futures import ThreadPoolExecutor as E"}


def test_exit_waits_for_pending_tasks(kind):
    r = run_script(f"""
        {FACTORY[kind]}
        from tests.test_conformance import nap_print
        if __name__ == "__main__":
            t = E(2)
            t.submit(nap_print, 0.5, "apple")
        """)
    assert r.stdout.strip() == "apple" and not r.stderr, r


def nap_print(t, msg):
    time.sleep(t)
    print(msg, flush=True)


def test_submit_from_atexit_hook_raises(kind):
    r = run_script(f"""
        import atexit
        {FACTORY[kind]}
        @atexit.register
        def run_last():
            try:
                t.submit(id, None)
            except RuntimeError as exc:
                print("runtime-error:", exc)
        if __name__ == "__main__":
            t = E(2)
            t.submit(id, 42).result()
        """)
    # (ProcessPoolExecutor says "after shutdown", shoal and ThreadPoolExecutor "after
    # interpreter shutdown"; CPython's own test checks this much)
    assert r.stdout.startswith("runtime-error: cannot schedule new futures after"), r


@pytest.mark.parametrize("kind", ["shoal", "thread"])  # ProcessPoolExecutor hangs: gh-83386
def test_shutdown_without_wait_then_exit_runs_the_task(kind):
    r = run_script(f"""
        {FACTORY[kind]}
        from tests.test_conformance import nap_print
        if __name__ == "__main__":
            t = E(3)
            t.submit(nap_print, 0.5, "apple")
            t.shutdown(wait=False)
        """)
    assert r.stdout.strip() == "apple" and not r.stderr, r


def test_shutdown_right_after_start_is_quick_and_quiet():
    r = run_script("""
        import time
        from shoal import Executor
        for _ in range(3):
            ex = Executor(5)
            t = time.monotonic()
            ex.shutdown()
            print(round(time.monotonic() - t, 2))
        """)
    assert not r.stderr, r.stderr
    assert all(float(x) < 2.0 for x in r.stdout.split()), r.stdout


# ---- constructor: max_workers, initializer ----------------------------------------------------
def test_max_workers_must_be_positive(kind):
    for n in (0, -1):
        with pytest.raises(ValueError, match="max_workers must be greater than 0"):
            make(kind, max_workers=n)


def test_initializer_must_be_callable(kind):
    with pytest.raises(TypeError, match="initializer must be a callable"):
        make(kind, initializer=42)


def test_initializer_runs_in_every_worker(kind):
    with make(kind, initializer=init, initargs=("ready",)) as ex:
        assert [f.result(30) for f in [ex.submit(read_init) for _ in range(6)]] == ["ready"] * 6
        assert list(ex.map(mul, [1, 2], [3, 4])) == [3, 8]


def test_failing_initializer_breaks_the_executor(kind, caplog):
    caplog.set_level(logging.CRITICAL, logger="concurrent.futures")
    with make(kind, initializer=init_fail) as ex:
        with pytest.raises(cf.BrokenExecutor):
            ex.submit(mul, 1, 2).result(30)
        deadline = time.monotonic() + 10
        while not ex._broken and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ex._broken
        with pytest.raises(cf.BrokenExecutor):
            ex.submit(mul, 1, 2)
    if kind == "shoal":  # logged in the caller (ProcessPoolExecutor logs in the worker)
        assert any("ValueError: error in initializer" in r.getMessage() for r in caplog.records)
        assert issubclass(InitializerError, BrokenProcessPool)


# ---- exceptions types --------------------------------------------------------------------------
def test_lost_worker_is_a_broken_process_pool(kind):
    kwargs = {"crash_limit": 1} if kind == "shoal" else {}
    with make(kind, **kwargs) as ex:
        exc = ex.submit(os._exit, 1).exception(60)
        assert isinstance(exc, BrokenProcessPool) and isinstance(exc, cf.BrokenExecutor)
        if kind == "shoal":  # shoal fails that task only; the executor goes on
            assert isinstance(exc, TaskLost)
            assert ex.submit(mul, 2, 2).result(30) == 4


def test_unpicklable_argument_fails_the_future(ex):
    exc = ex.submit(id, threading.Lock()).exception(30)
    assert isinstance(exc, TypeError)
    if isinstance(ex, shoal.Executor):  # shoal's is also a PicklingError
        assert isinstance(exc, pickle.PicklingError)


def test_exceptions_subclass_the_stdlib_ones():
    assert issubclass(shoal.TaskLost, BrokenProcessPool)
    assert issubclass(shoal.HeadLost, BrokenProcessPool)
    assert issubclass(shoal.HeadLost, shoal.ExecutorError)
    from shoal.task.codec import EncodeError

    assert issubclass(EncodeError, pickle.PicklingError) and issubclass(EncodeError, TypeError)


def test_systemexit_while_unpickling_a_result_fails_that_future_only():
    with shoal.Executor(max_workers=2) as ex:
        bad = ex.submit(exit_on_load)
        exc = bad.exception(30)
        assert isinstance(exc, RemoteError) and isinstance(exc.__cause__, SystemExit)
        assert ex.submit(mul, 3, 3).result(30) == 9  # the client goes on


# ---- multiprocessing.Manager proxies ------------------------------------------------------------
def test_manager_proxies_reach_the_tasks(kind):
    with multiprocessing.Manager() as manager, make(kind) as ex:
        shared = manager.list()
        assert [f.result(30) for f in [ex.submit(append, shared, i) for i in range(4)]] \
            == [0, 1, 2, 3]
        assert sorted(shared) == [0, 1, 2, 3]
