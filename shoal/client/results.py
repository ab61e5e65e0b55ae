"""What ``Executor.map`` hands back: the values of its futures in order, freed as they go."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.client.progress import MapProgress
    from shoal.task.future import ShoalFuture


def wait_all(futs: list[ShoalFuture]) -> None:
    """Wait until every future is done, without registering a waiter on each."""
    for f in futs:
        f._wait(None)


def ordered_results(futs: list[ShoalFuture], deadline: float | None, chunked: bool,
             view: MapProgress | None = None) -> Iterator[Any]:
    """The values of ``futs`` in order. Holds no reference to a value it handed out, nor
    to a future it took the value from (as concurrent.futures' map). ``view``: the map's
    progress line, closed when the caller is done with the results."""
    try:
        futs.reverse()  # take from the end: results in order, finished futures freed
        while futs:
            if chunked:
                chunk = take(futs, deadline)
                chunk.reverse()
                while chunk:
                    yield chunk.pop()
            else:
                yield take(futs, deadline)
    finally:
        if view is not None:
            view.close()
        left_over = [f for f in futs if not f.done()]
        if left_over:  # the caller stopped early (error, timeout, close): drop the rest at once
            owner = left_over[0]._owner
            if owner is not None and owner._cancel(left_over):
                for f in left_over:
                    if f.tid not in getattr(owner, "_futures", {}):
                        f._settle(None, None, cancelled=True)


def take(futs: list[ShoalFuture], deadline: float | None) -> Any:
    """The value of the last future of ``futs``, removed once it has one; if it raises (a
    timeout...), it stays for the caller to cancel with the rest."""
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    value = futs[-1].result(left)
    del futs[-1]
    return value
