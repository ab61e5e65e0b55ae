"""``map`` inside a task (``shoal.futures.map`` or the executor's): chunked by default as the
client's map is, one sub-task per item with ``chunksize=1``; ordered results, errors and
time-outs as the client's. Real head, agent and workers; the head's trace counts the
sub-tasks that left the parent's worker."""

from __future__ import annotations

import concurrent.futures as cf
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from shoal import Executor, futures, trace

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import tests


def square(x: int) -> int:
    return x * x


def fails_at(x: int) -> int:
    if x == 37:
        raise KeyError(f"item {x}")
    return x


def nested(n: int, chunksize: int | None) -> list[int]:
    if chunksize is None:
        return list(futures.map(square, range(n)))
    return list(futures.map(square, range(n), chunksize=chunksize))


def nested_pairs(n: int) -> list[int]:
    # several iterables, zipped to the shortest, as the builtin map
    return list(futures.map(pow, range(n), [2] * (n + 5)))


def nested_error(n: int) -> str:
    try:
        list(futures.map(fails_at, range(n)))
    except KeyError as exc:
        return f"caught {exc}"
    return "not raised"


def nested_timeout() -> str:
    try:
        list(futures.map(time.sleep, [3.0] * 6, timeout=0.3))
    except (TimeoutError, cf.TimeoutError):
        return "timed out"
    return "no time-out"


def traced_subtasks(path: Path, parent: int) -> int:
    return sum(1 for a in trace.read(path).attempts if a.tid != parent)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


def test_nested_map_is_chunked_by_default(tmp: Path) -> None:
    path = tmp / "run.trace"
    with Executor(workers=2, trace=str(path)) as ex:
        fut = ex.submit(nested, 1000, None)
        assert fut.result(timeout=60) == [x * x for x in range(1000)]
    # 2 slots: about four chunks per slot (the client's rule), not 1,000 sub-tasks
    assert traced_subtasks(path, -1) - 1 <= 8


def test_nested_map_chunksize_one_sends_each_item(tmp: Path) -> None:
    path = tmp / "run.trace"
    with Executor(workers=2, trace=str(path)) as ex:
        assert ex.submit(nested, 300, 1).result(timeout=60) == [x * x for x in range(300)]
    # the first few stay in the parent's worker (kept sub-tasks); the rest leave it
    assert traced_subtasks(path, -1) - 1 >= 250


def test_nested_map_zips_like_map_and_keeps_order() -> None:
    with Executor(workers=2) as ex:
        assert ex.submit(nested_pairs, 257).result(timeout=60) == [x ** 2 for x in range(257)]
        assert ex.submit(nested, 0, None).result(timeout=60) == []
        assert ex.submit(nested, 5, 3).result(timeout=60) == [0, 1, 4, 9, 16]


def test_nested_map_raises_the_items_error_and_times_out() -> None:
    with Executor(workers=2) as ex:
        assert ex.submit(nested_error, 100).result(timeout=60) == "caught 'item 37'"
        t0 = time.monotonic()
        assert ex.submit(nested_timeout).result(timeout=60) == "timed out"
        # a sleep already started in the parent's worker delays its wake-up (greenlets do
        # not preempt); the six sleeps on two workers would take 9 s
        assert time.monotonic() - t0 < 6.5


def test_nested_map_rejects_bad_chunksize() -> None:
    with Executor(workers=1) as ex:
        with pytest.raises(ValueError, match="chunksize"):
            ex.submit(nested, 10, 0).result(timeout=60)


