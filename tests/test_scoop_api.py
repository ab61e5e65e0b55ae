"""SCOOP's API under SCOOP's names: mapReduce/mapScan trees and shared constants, on a real
local runtime (head, agent and worker processes)."""

from __future__ import annotations

import functools
import itertools
import operator
import os
import time

import pytest

from shoal import Executor, futures, shared


@pytest.fixture(scope="module", autouse=True)
def runtime():
    """One local runtime of 2 workers as the one ``shoal.futures`` uses."""
    with Executor(workers=2) as ex:
        futures.set_executor(ex)
        try:
            yield ex
        finally:
            futures.set_executor(None)


def sq(x):
    return x * x


def cat(a, b):
    return a + b


def matmul(a, b):  # 2x2 integer matrices as tuples: associative, not commutative
    return ((a[0][0] * b[0][0] + a[0][1] * b[1][0], a[0][0] * b[0][1] + a[0][1] * b[1][1]),
            (a[1][0] * b[0][0] + a[1][1] * b[1][0], a[1][0] * b[0][1] + a[1][1] * b[1][1]))


def mat_of(k):
    return ((1, k % 3), (k % 5, 1))


def tag(pid_and_x):
    return f"<{pid_and_x}>"


def mul_add(a, b):
    return a * b + 1


# ---- mapReduce / mapScan -------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 63, 64, 65, 1000])
def test_map_reduce_keeps_order_for_non_commutative_operators(n):
    words = [str(i) for i in range(n)]
    assert futures.mapReduce(tag, cat, words) == functools.reduce(cat, map(tag, words))
    assert futures.mapScan(tag, cat, words) == list(itertools.accumulate(map(tag, words), cat))


def test_matrix_product_tree_equals_serial():
    ks = range(300)
    want = functools.reduce(matmul, map(mat_of, ks))
    assert futures.mapReduce(mat_of, matmul, ks) == want
    assert futures.map_reduce(mat_of, matmul, ks) == want       # the snake_case name
    scan = futures.map_scan(mat_of, matmul, ks)
    assert scan == list(itertools.accumulate(map(mat_of, ks), matmul))


def test_several_iterables_are_zipped_like_map():
    a, b = range(500), range(1000, 1400)  # the shortest one decides, as in map()
    assert futures.mapReduce(operator.mul, operator.add, a, b) == sum(map(operator.mul, a, b))
    assert futures.mapScan(operator.mul, operator.add, a, b) == list(
        itertools.accumulate(map(operator.mul, a, b)))


def test_empty_and_single_item_match_the_stdlib():
    with pytest.raises(TypeError, match="mapReduce\\(\\) of empty iterable"):
        futures.mapReduce(sq, operator.add, [])
    assert futures.mapScan(sq, operator.add, []) == []
    assert futures.mapReduce(sq, operator.add, [7]) == 49
    assert futures.mapScan(sq, operator.add, iter([7])) == [49]   # any iterable
    with pytest.raises(TypeError, match="map function must be callable"):
        futures.mapReduce(3, operator.add, [1])
    with pytest.raises(TypeError, match="reduction operator must be callable"):
        futures.mapScan(sq, None, [1])


def test_reduction_runs_in_tasks_not_in_the_caller():
    # the leaves (map + reduce) run on workers: their pids are not ours
    pids = futures.mapReduce(lambda x: {os.getpid()}, operator.or_, range(200))
    assert pids and os.getpid() not in pids


def slow_cat(a, b, path):
    time.sleep(0.03)
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    return a + b


def test_a_slow_operator_combines_in_tasks(tmp_path):
    # every leaf is one item: all 15 combinations are operator calls, made in a tree of
    # tasks (the operator is slow), not in the caller
    log = tmp_path / "ops.txt"
    words = [f"w{i}." for i in range(16)]
    got = futures.mapReduce(str.upper, functools.partial(slow_cat, path=str(log)), words)
    assert got == "".join(w.upper() for w in words)
    pids = log.read_text().split()
    assert len(pids) == 15 and str(os.getpid()) not in pids


def sleepy(x):
    time.sleep(1)
    return x


def test_timeout_raises():
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        futures.mapReduce(sleepy, operator.add, range(2), timeout=0.2)
    with pytest.raises(TimeoutError):
        futures.mapScan(sleepy, operator.add, range(2), timeout=0.2)
    assert time.monotonic() - t0 < 0.9


def boom_at_13(x):
    if x == 13:
        raise ValueError("item 13")
    return x


def test_an_exception_in_the_map_reaches_the_caller():
    with pytest.raises(ValueError, match="item 13"):
        futures.mapReduce(boom_at_13, operator.add, range(100))


def nested_reduce(k):
    return futures.mapReduce(sq, operator.add, range(k)), futures.mapScan(str, cat, map(str, range(k)))


def test_nested_use_inside_tasks():
    got = list(futures.map(nested_reduce, [1, 10, 200]))
    for k, (red, scan) in zip([1, 10, 200], got, strict=True):
        assert red == sum(x * x for x in range(k))
        assert scan == list(itertools.accumulate(map(str, range(k)), cat))


# ---- shared constants ----------------------------------------------------------------

def read_const(name, timeout=0.1):
    return shared.getConst(name, timeout=timeout)


def read_at_depth(name, depth):
    if depth <= 1:
        return read_const(name), os.getpid()
    return futures.submit(read_at_depth, name, depth - 1).result()


def test_constants_are_read_in_tasks_at_any_depth():
    table = {i: str(i) * 3 for i in range(50)}
    shared.setConst(depth_table=table, depth_greeting="Hello World!")
    assert shared.getConst("depth_table") is table      # the caller's own object
    for depth in (1, 2, 4):
        got = [v for v, _ in futures.map(read_at_depth, ["depth_table"] * 6, [depth] * 6)]
        assert got == [table] * 6
    assert futures.submit(read_at_depth, "depth_greeting", 3).result()[0] == "Hello World!"
    assert shared.get_const("depth_greeting") == "Hello World!"   # snake_case alias


def set_in_task(name):
    shared.setConst(**{name: "again"})


def test_setting_a_name_twice_is_an_error_naming_it():
    shared.setConst(twice=1)
    with pytest.raises(TypeError, match="already exists: twice"):
        shared.setConst(twice=2)
    with pytest.raises(TypeError, match="already exists: twice"):
        shared.setConst(other_fresh=3, twice=2)
    assert shared.getConst("other_fresh") is None   # nothing of a refused call is set
    assert shared.getConst("twice") == 1
    assert futures.submit(read_const, "twice").result() == 1
    with pytest.raises(TypeError, match="already exists: twice"):  # in a task too
        futures.submit(set_in_task, "twice").result()


def test_an_unpicklable_constant_fails_at_set_const():
    import threading

    with pytest.raises(TypeError, match="shared constant 'lock_const' cannot be sent"):
        shared.setConst(lock_const=threading.Lock())
    assert shared.getConst("lock_const", timeout=0) is None
    shared.setConst(lock_const=5)   # the failed call set nothing: the name is still free


def test_get_const_times_out_with_none_as_scoop():
    t0 = time.monotonic()
    assert shared.getConst("never_set", timeout=0.2) is None
    assert time.monotonic() - t0 >= 0.2
    t0 = time.monotonic()
    assert futures.submit(read_const, "never_set", 0.3).result() is None
    assert time.monotonic() - t0 >= 0.3
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        shared.getConst("x", timeout=-1)


def set_in_task_and_read_below(n):
    shared.setConst(from_task=n * 10)
    subs = [futures.submit(read_at_depth, "from_task", 2) for _ in range(8)]
    return shared.getConst("from_task"), [f.result() for f in subs]


def test_a_constant_set_in_a_task_reaches_its_sub_tasks():
    mine, below = futures.submit(set_in_task_and_read_below, 4).result()
    assert mine == 40
    assert [v for v, _ in below] == [40] * 8


def record_load(path, payload):
    """Unpickling a Probe: one line per unpickling process (the pid)."""
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    return {"payload": payload}


class Probe:
    def __init__(self, path, payload):
        self.path, self.payload = path, payload

    def __reduce__(self):
        return (record_load, (self.path, self.payload))


def probe_len(name):
    return len(shared.getConst(name)["payload"]), os.getpid()


def probe_len_nested(name):
    """(length, pid) read here and in a sub-task."""
    return [probe_len(name), futures.submit(probe_len, name).result()]


def test_a_constant_travels_once_per_worker(tmp_path):
    path = str(tmp_path / "loads.txt")
    shared.setConst(probe=Probe(path, b"x" * 1_000_000))
    got = list(futures.map(probe_len, ["probe"] * 200, chunksize=1))
    got += [r for pair in futures.map(probe_len_nested, ["probe"] * 50) for r in pair]
    assert {n for n, _ in got} == {1_000_000}
    with open(path) as f:
        loads = f.read().split()
    # every worker that ran a task unpickled it once: it was sent to it once, not per task
    assert sorted(loads) == sorted({str(p) for _, p in got})
    assert len(loads) <= 2


def test_a_constant_set_later_reaches_tasks_already_waiting():
    # both workers hold a task parked in getConst; the constant is pushed to every worker
    waiting = [futures.submit(read_const, "late", 5) for _ in range(4)]
    time.sleep(0.3)
    assert not any(f.done() for f in waiting)
    shared.setConst(late="arrived")
    assert [f.result(8) for f in waiting] == ["arrived"] * 4


def test_two_agents_each_get_the_constant_once(head, runtime, tmp_path):
    connfile, _, add_agent = head
    for name in ("a1", "a2"):
        add_agent("--slots", "1", "--workers", "1", "--name", name)
    path = str(tmp_path / "loads2.txt")
    with Executor(connect=str(connfile), min_agents=2) as ex2:
        futures.set_executor(ex2)
        try:
            shared.setConst(probe2=Probe(path, b"y" * 100_000))
            got = []
            for name in ("a1", "a2"):  # both agents run tasks, nested ones too
                fs = [ex2.options(agent=name).submit(probe_len_nested, "probe2") for _ in range(20)]
                got += [r for f in fs for r in f.result(30)]
        finally:
            futures.set_executor(runtime)
    assert {n for n, _ in got} == {100_000}
    with open(path) as f:
        loads = f.read().split()
    assert sorted(loads) == sorted({str(p) for _, p in got}) and len(loads) == 2


def read_own(name):
    """This client's constant here and in a sub-task (another worker may run it)."""
    return shared.getConst(name, timeout=5), futures.submit(read_const, name, 5).result()


def test_two_clients_of_one_head_have_their_own_constants(head, runtime):
    connfile, _, add_agent = head
    add_agent("--slots", "2", "--workers", "2")
    with Executor(connect=str(connfile)) as a, Executor(connect=str(connfile)) as b:
        try:
            futures.set_executor(a)
            shared.setConst(same_name="from a")
            futures.set_executor(b)
            shared.setConst(same_name="from b")   # another client: no clash
            with pytest.raises(TypeError, match="already exists: same_name"):
                shared.setConst(same_name="again")  # within one client: still an error
            assert shared.getConst("same_name") == "from b"
            got_b = [f.result(30) for f in [b.submit(read_own, "same_name") for _ in range(6)]]
            futures.set_executor(a)
            assert shared.getConst("same_name") == "from a"
            got_a = [f.result(30) for f in [a.submit(read_own, "same_name") for _ in range(6)]]
        finally:
            futures.set_executor(runtime)
    assert got_a == [("from a", "from a")] * 6 and got_b == [("from b", "from b")] * 6


# ---- the other SCOOP names -----------------------------------------------------------

def test_scoop_names_are_all_there():
    for name in ("submit", "map", "map_as_completed", "mapReduce", "mapScan", "map_reduce",
                 "map_scan", "wait", "as_completed", "shutdown", "ALL_COMPLETED",
                 "FIRST_COMPLETED", "FIRST_EXCEPTION"):
        assert name in futures.__all__
        assert name.isupper() or callable(getattr(futures, name))
    for name in ("setConst", "getConst", "set_const", "get_const"):
        assert callable(getattr(shared, name))


def test_map_as_completed_and_wait():
    assert sorted(futures.map_as_completed(sq, range(20))) == [x * x for x in range(20)]
    fs = [futures.submit(sq, x) for x in range(5)]
    done, not_done = futures.wait(fs, return_when=futures.ALL_COMPLETED)
    assert not not_done and sorted(f.result() for f in done) == [0, 1, 4, 9, 16]
    assert sorted(f.result() for f in futures.as_completed(fs)) == [0, 1, 4, 9, 16]


def test_keywords_scoop_ignores_are_ignored_with_a_warning():
    # SCOOP's tree_traversal example passes map(..., parallelLevel=2), which SCOOP ignores
    with pytest.warns(UserWarning, match="futures.map: ignored keyword argument.*parallelLevel"):
        assert list(futures.map(sq, [3], parallelLevel=2)) == [9]
    with pytest.warns(UserWarning, match="mapReduce: ignored"):
        assert futures.mapReduce(sq, operator.add, [1, 2], other=1) == 5


PROGRAM = '''
import operator
from shoal import futures, shared

def score(i):
    return shared.getConst("weights")[i] * futures.submit(abs, -i).result()

if __name__ == "__main__":
    shared.setConst(weights=[10, 20, 30, 40])
    print(futures.mapReduce(score, operator.add, range(4)))
    print(futures.mapScan(str, operator.add, "abcd"))
    try:
        shared.setConst(weights=[])
    except TypeError as exc:
        print("TypeError", exc)
'''


def test_a_scoop_program_under_python_m_shoal(tmp_path):
    import subprocess
    import sys

    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "shoal", "-n", "2", str(prog)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        str(10 * 0 + 20 * 1 + 30 * 2 + 40 * 3), "['a', 'ab', 'abc', 'abcd']",
        "TypeError This constant already exists: weights (shoal.shared constants are set once)"]
