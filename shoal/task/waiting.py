"""``wait`` and ``as_completed`` that also work inside tasks.

In a client process they are ``concurrent.futures``' own. Inside a task on a worker they
park the task (its worker goes on with other tasks) instead of blocking the process.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Iterable, Iterator

from shoal.task import context

_std_wait = cf.wait
_std_as_completed = cf.as_completed

ALL_COMPLETED = cf.ALL_COMPLETED
FIRST_COMPLETED = cf.FIRST_COMPLETED
FIRST_EXCEPTION = cf.FIRST_EXCEPTION




def wait(fs: Iterable[cf.Future], timeout: float | None = None,
         return_when: str = ALL_COMPLETED) -> cf._base.DoneAndNotDoneFutures:
    """Like :func:`concurrent.futures.wait`; inside a task it yields the worker."""
    fs = set(fs)
    wc = context.current()
    if wc is None:
        return _std_wait(fs, timeout, return_when)
    wc._block(list(fs), timeout, return_when)
    done = {f for f in fs if f.done()}
    return cf._base.DoneAndNotDoneFutures(done, fs - done)


def as_completed(fs: Iterable[cf.Future], timeout: float | None = None) -> Iterator[cf.Future]:
    """Like :func:`concurrent.futures.as_completed`; inside a task it yields the worker."""
    wc = context.current()
    if wc is None:
        yield from _std_as_completed(fs, timeout)
        return
    pending = set(fs)
    deadline = None if timeout is None else time.monotonic() + timeout
    while pending:
        done = [f for f in pending if f.done()]
        if not done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"{len(pending)} (of {len(pending)}) futures unfinished")
            wc._block(list(pending), left, FIRST_COMPLETED)
            continue
        for f in done:
            pending.discard(f)
            yield f
