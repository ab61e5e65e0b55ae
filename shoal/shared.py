"""SCOOP's shared constants: ``from shoal import shared``.

``shared.setConst(name=value, ...)`` in the main program (or in a task) makes values
readable with ``shared.getConst("name")`` in every task submitted afterwards, at any
nesting depth. A name is set once: setting it again raises ``TypeError`` naming it, as
SCOOP does.

How a constant flows: ``setConst`` pickles the values at once (an unpicklable value fails
there, naming the constant) into one blob with a negative id from the submitter's id space,
and puts it with the functions not sent yet. It travels like a function, with a no-op task
``setConst`` submits and waits for (SCOOP's setConst also returns once the constant
reached a worker). The head keeps it and sends every constant once to each agent, at once;
each agent once to each of its workers. A worker unpickles a constant when a task first
calls ``getConst`` after it arrived and keeps the value for its later tasks.

Namespaces: each client of a head (an executor, and its tasks at any depth) has its own
constants, so two programs using one head may use the same names. A blob carries the
number the head gave the client (tasks carry it as their owner); a worker files what it
receives under that number and a task reads its own client's (a worker runs one client's
tasks at a time). In the program itself the constants belong to its executor.
See docs/scoop.md.
"""

from __future__ import annotations

import concurrent.futures as cf
import pickle
import threading
import time
import weakref
from typing import Any

from shoal.task import context
from shoal.task.codec import dumps

__all__ = ["getConst", "get_const", "setConst", "set_const"]

# what this process knows, per client: in a worker by client number (set in a task or
# received), in a program by executor
_by_client: dict[int | None, dict[str, Any]] = {}
_by_executor: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _space(wc: Any, ex: Any = None) -> dict[str, Any]:
    """The constants of the client this code runs for (made on first use)."""
    if wc is not None:
        return _by_client.setdefault(wc.owner, {})
    if ex is None:
        from shoal import futures

        ex = futures._default  # getConst does not start a runtime
        if ex is None:
            return {}
    space = _by_executor.get(ex)
    if space is None:
        space = _by_executor[ex] = {}
    return space


def setConst(**kwargs: Any) -> None:  # noqa: N802 - SCOOP's name
    """Share ``name=value`` pairs with every task submitted from now on (read-only).

    :raises TypeError: a name is already set, or a value cannot be pickled.
    """
    from shoal import futures

    if not kwargs:
        return
    wc = context.current()
    if wc is not None:
        _absorb(wc)  # constants that reached this worker count as set
    ex = futures._executor()
    with _lock:
        consts = _space(wc, ex)
        for name in kwargs:
            if name in consts:
                raise TypeError(f"This constant already exists: {name} "
                                "(shoal.shared constants are set once)")
        blobs: dict[str, bytes] = {}
        for name, value in kwargs.items():
            try:
                blobs[name] = dumps(value)
            except Exception as exc:  # noqa: BLE001 - any failure: name the constant
                raise TypeError(f"shared constant {name!r} cannot be sent to workers "
                                f"(not picklable): {exc}") from exc
        # filed under the client: a task's owner, or the number the head gave the executor
        blob = pickle.dumps((wc.owner if wc is not None else ex._client_num, blobs), protocol=5)
        if wc is not None and ex is wc:
            wc.encoder.new_funcs[-wc.encoder.next_tid()] = blob
        else:
            with ex._lock:
                enc = ex._encoder
                enc.new_funcs[-enc.next_tid()] = blob
        consts.update(kwargs)
    # As in SCOOP, return once the constant reached a worker: a no-op task carries it
    # (functions and constants leave with a batch of tasks), and the head and agents
    # pass it on to every agent and worker at once.
    carrier = ex.submit(_carrier)
    if wc is not None and ex is wc:
        wc._export(float("inf"))  # a kept sub-task would not leave this process
    carrier.result()


def _carrier() -> None:
    """The task that takes new constants out of the process that set them."""


def getConst(name: str, timeout: float | None = 0.1) -> Any:  # noqa: N802 - SCOOP's name
    """The value of shared constant ``name``; ``None`` if it has not arrived within
    ``timeout`` seconds (SCOOP's semantics; ``None`` or ``inf``: wait for it)."""
    if timeout is not None and timeout < 0:
        raise ValueError(f"getConst: timeout must be >= 0, not {timeout}")
    deadline = None if timeout is None else time.monotonic() + timeout
    wc = context.current()
    while True:
        if wc is not None:
            _absorb(wc)
        consts = _space(wc)
        if name in consts:
            return consts[name]
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        step = 0.01 if left is None else min(0.01, left)
        if wc is not None:  # park this task: the worker goes on and receives messages
            wc._block([cf.Future()], step, cf.ALL_COMPLETED)
        else:
            time.sleep(step)


def _absorb(wc: Any) -> None:
    """Unpickle the constants that reached this worker since the last look."""
    blobs = wc.func_blobs
    for k in [k for k in blobs if k < 0]:
        client, named = pickle.loads(blobs.pop(k))
        if client != wc.owner:  # another client's (this worker never runs its tasks)
            continue
        values = {n: pickle.loads(b) for n, b in named.items()}
        with _lock:
            _by_client.setdefault(client, {}).update(values)


set_const = setConst
get_const = getConst
