"""Parallel reduction and prefix scan (``futures.mapReduce`` / ``futures.mapScan``).

The items are cut into leaves (about ``LEAVES``, more on a big runtime), each sent once,
straight to a worker, as one task that maps its items and reduces (or scans) them where
they were mapped. The leaf results are then combined pairwise in a binary tree as they
arrive: siblings ``(2j, 2j+1)`` make their parent, so the left operand always holds the
earlier items and any associative operator works, commutative or not. A combination runs
as a task (the tree's levels in parallel) when the operator is slow, and in the caller
when one call is cheaper than sending a task (``INLINE_OP_S``, measured by the leaves).

SCOOP splits the items in two recursively down to single items, re-sending each half at
every level; leaves of many items send each item once and make ~64 tasks for a million
items instead of two million. Results equal ``functools.reduce`` / ``itertools.accumulate``
over the mapped values, empty and single-item inputs included (SCOOP 0.7 fails on those).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import itertools
import time
from collections.abc import Callable, Iterable
from typing import Any

from shoal.task.waiting import FIRST_COMPLETED, wait

LEAVES = 64           # leaves at least (4 per slot on a bigger runtime)
INLINE_OP_S = 0.001   # an operator call faster than this is made in the caller, not sent

_clock = time.perf_counter


def _leaf(fn: Callable[..., Any], op: Callable[[Any, Any], Any], items: Any,
          star: bool, scan: bool) -> tuple[Any, float, int]:
    """Map and reduce (or scan) one leaf; with the seconds and count of operator calls."""
    mapped = list(itertools.starmap(fn, items) if star else map(fn, items))
    t0 = _clock()
    value = list(itertools.accumulate(mapped, op)) if scan else functools.reduce(op, mapped)
    return value, _clock() - t0, len(mapped) - 1


def _apply(op: Callable[[Any, Any], Any], a: Any, b: Any) -> tuple[Any, float, int]:
    t0 = _clock()
    value = op(a, b)
    return value, _clock() - t0, 1


def _shift(op: Callable[[Any, Any], Any], offset: Any, values: list[Any]) -> tuple[Any, float, int]:
    """A leaf's prefixes, continued from the total of all leaves before it."""
    t0 = _clock()
    out = [op(offset, x) for x in values]
    return out, _clock() - t0, len(values)


class _OpCost:
    """Seconds per operator call, from what leaves and combinations reported."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def add(self, reply: tuple[Any, float, int]) -> Any:
        self.seconds += reply[1]
        self.calls += reply[2]
        return reply[0]

    def cheap(self) -> bool:  # unknown counts as slow: the first combinations are sent
        return self.calls > 0 and self.seconds / self.calls < INLINE_OP_S


def _items(iterables: tuple[Iterable[Any], ...]) -> tuple[Any, bool]:
    if len(iterables) > 1:
        return list(zip(*iterables, strict=False)), True
    it = iterables[0]
    if isinstance(it, (list, tuple, range)):  # sliced as they are (a range stays tiny)
        return it, False
    return list(it), False


def tree(submit: Callable[..., Any], fn: Callable[..., Any], op: Callable[[Any, Any], Any],
         iterables: tuple[Iterable[Any], ...], scan: bool, what: str,
         timeout: float | None = None, slots: int = 0) -> Any:
    """``reduce`` (or ``accumulate`` when ``scan``) of ``op`` over ``fn`` mapped on the
    zipped ``iterables``, computed by tasks sent with ``submit``."""
    if not callable(fn):
        raise TypeError(f"{what}: the map function must be callable, not {type(fn).__name__}")
    if not callable(op):
        raise TypeError(f"{what}: the reduction operator must be callable, not {type(op).__name__}")
    if not iterables:
        raise TypeError(f"{what} needs at least one iterable")
    items, star = _items(iterables)
    n = len(items)
    if n == 0:
        if scan:
            return []
        raise TypeError(f"{what}() of empty iterable with no initial value")
    nleaves = min(n, max(LEAVES, 4 * slots))
    cuts = [n * i // nleaves for i in range(nleaves + 1)]
    deadline = None if timeout is None else time.monotonic() + timeout
    cost = _OpCost()
    leaves = [submit(_leaf, fn, op, items[cuts[i]:cuts[i + 1]], star, scan)
              for i in range(nleaves)]
    del items
    try:
        if scan:
            return _scan(submit, op, leaves, cost, deadline)
        return _reduce(submit, op, leaves, cost, deadline)
    except BaseException:
        for f in leaves:
            f.cancel()
        raise


def _left(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("mapReduce/mapScan: timed out")
    return left


def _reduce(submit: Callable[..., Any], op: Callable[[Any, Any], Any],
            leaves: list[cf.Future], cost: _OpCost, deadline: float | None) -> Any:
    """Combine the leaves' values pairwise, bottom up, as they arrive."""
    width = [len(leaves)]          # nodes per level
    while width[-1] > 1:
        width.append((width[-1] + 1) // 2)
    top = len(width) - 1
    ready: dict[tuple[int, int], Any] = {}
    pending: dict[cf.Future, tuple[int, int]] = {f: (0, i) for i, f in enumerate(leaves)}

    def arrive(level: int, i: int, value: Any) -> None:
        while True:
            if level == top:
                ready[(level, i)] = value
                return
            j = i ^ 1
            if j >= width[level]:      # the last node of an odd level: promoted as it is
                level, i = level + 1, i // 2
                continue
            other = ready.pop((level, j), _MISSING)
            if other is _MISSING:
                ready[(level, i)] = value
                return
            left, right = (other, value) if j < i else (value, other)
            level, i = level + 1, i // 2
            if not cost.cheap():
                pending[submit(_apply, op, left, right)] = (level, i)
                return
            value = cost.add(_apply(op, left, right))

    while pending:
        done, _ = wait(list(pending), timeout=_left(deadline), return_when=FIRST_COMPLETED)
        if not done:
            _left(deadline)
            continue
        for f in done:
            level, i = pending.pop(f)
            arrive(level, i, cost.add(f.result()))
    return ready[(top, 0)]


def _scan(submit: Callable[..., Any], op: Callable[[Any, Any], Any],
          leaves: list[cf.Future], cost: _OpCost, deadline: float | None) -> list[Any]:
    """Each leaf's prefixes, continued by the total of the leaves before it."""
    parts = [cost.add(f.result(_left(deadline))) for f in leaves]
    offsets: list[Any] = [None]
    for p in parts[:-1]:
        offsets.append(p[-1] if offsets[-1] is None else op(offsets[-1], p[-1]))
    if cost.cheap():
        out = parts[0]
        for off, p in zip(offsets[1:], parts[1:], strict=True):
            out.extend(op(off, x) for x in p)
        return out
    shifted = [submit(_shift, op, off, p) for off, p in zip(offsets[1:], parts[1:], strict=True)]
    out = parts[0]
    for f in shifted:
        out.extend(cost.add(f.result(_left(deadline))))
    return out


_MISSING = object()
