"""Parallel reduction and prefix scan in a tree of tasks (``futures.mapReduce``/``mapScan``).

SCOOP's shape: a task splits its items in two, submits the right half as a sub-task,
works on the left half itself (recursively) and combines the two with the operator once
the right half is back. Unlike SCOOP, a node stops splitting at a leaf of ``leaf`` items
(about ``LEAVES`` leaves in all), which it maps and reduces in one go: a million small
items make ~64 tasks, not two million. The caller's own process only splits the root
(both halves become tasks) and combines their two results.

Order is kept: the left operand is always the earlier items, so any associative operator
works, commutative or not (string concatenation, matrix product). The results equal
``functools.reduce`` / ``itertools.accumulate`` over the mapped values, empty and
single-item inputs included (SCOOP 0.7 fails on those).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
from typing import Any

LEAVES = 64  # leaves per tree: enough to spread over the workers, few enough to stay cheap


def _leaf(fn: Callable[..., Any], op: Callable[[Any, Any], Any], items: list[Any],
          star: bool, scan: bool) -> Any:
    mapped = itertools.starmap(fn, items) if star else map(fn, items)
    if scan:
        return list(itertools.accumulate(mapped, op))
    return functools.reduce(op, mapped)


def _combine(op: Callable[[Any, Any], Any], left: Any, right: Any, scan: bool) -> Any:
    if not scan:
        return op(left, right)
    total = left[-1]
    left.extend(op(total, x) for x in right)
    return left


def _node(fn: Callable[..., Any], op: Callable[[Any, Any], Any], items: list[Any],
          leaf: int, star: bool, scan: bool) -> Any:
    """One node of the tree, run as a task: right half out, left half here."""
    if len(items) <= leaf:
        return _leaf(fn, op, items, star, scan)
    from shoal import futures

    mid = len(items) // 2
    right = futures.submit(_node, fn, op, items[mid:], leaf, star, scan)
    left = _node(fn, op, items[:mid], leaf, star, scan)
    return _combine(op, left, right.result(), scan)


def tree(submit: Callable[..., Any], fn: Callable[..., Any], op: Callable[[Any, Any], Any],
         iterables: tuple[Iterable[Any], ...], scan: bool, what: str,
         timeout: float | None = None) -> Any:
    """``reduce`` (or ``accumulate`` when ``scan``) of ``op`` over ``fn`` mapped on the
    zipped ``iterables``, computed by a tree of tasks sent with ``submit``."""
    if not callable(fn):
        raise TypeError(f"{what}: the map function must be callable, not {type(fn).__name__}")
    if not callable(op):
        raise TypeError(f"{what}: the reduction operator must be callable, not {type(op).__name__}")
    if not iterables:
        raise TypeError(f"{what} needs at least one iterable")
    star = len(iterables) > 1
    items = list(zip(*iterables, strict=False)) if star else list(iterables[0])
    n = len(items)
    if n == 0:
        if scan:
            return []
        raise TypeError(f"{what}() of empty iterable with no initial value")
    leaf = max(1, -(-n // LEAVES))
    if n <= leaf:  # one leaf: one task
        return submit(_leaf, fn, op, items, star, scan).result(timeout)
    mid = n // 2
    right = submit(_node, fn, op, items[mid:], leaf, star, scan)
    left = submit(_node, fn, op, items[:mid], leaf, star, scan)
    del items
    return _combine(op, left.result(timeout), right.result(timeout), scan)
