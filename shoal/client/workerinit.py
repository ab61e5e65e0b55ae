"""What a worker sets up before it runs an executor's functions.

``Executor(initializer=f, initargs=a)`` runs ``f(*a)`` once in every worker process, before
the first task of that executor there, as ``ProcessPoolExecutor`` does. A warm worker
outlives executors and serves several, so the functions an executor sends are wrapped
(:class:`Initialized`): the first call in a process runs the initializer, later calls
only check a dict. A failed initializer fails every task of that executor in that process
with :class:`~shoal.task.future.InitializerError` (the client then breaks the executor).

Sub-tasks (submitted by the executor's tasks, at any depth) are wrapped the same way: when
a worker unpickles a wrapped function, it makes its own sub-task encoder wrap with the same
initializer, token and key (a worker runs one client's tasks only: the agent replaces a
worker before it takes another client's task), so a worker that runs only sub-tasks has
run the initializer before the first of them.

Manager proxies (``multiprocessing.Manager().list()``...) passed to tasks connect back to
their manager with the process's ``multiprocessing`` authkey, which a worker does not
share with the caller. The executor of a runtime it started itself sends the caller's
key with each function (inside the authenticated, and where asked encrypted, messages of
the run); unpickling the function sets it in the worker before the task's arguments (and
the proxies among them) are unpickled.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

_state: dict[str, BaseException | None] = {}  # per process: initializer token -> its error


def wrapper(initializer: Callable[..., object] | None, initargs: tuple[Any, ...],
            token: str, authkey: bytes | None) -> Callable[[Callable[..., Any]], Any] | None:
    """What an Encoder pickles in place of each function (None: the function itself)."""
    if initializer is None and authkey is None:
        return None
    key = None if authkey is None else _AuthKey(authkey)

    def wrap(fn: Callable[..., Any]) -> Any:
        if initializer is None:
            return _WithKey(key, fn)
        return Initialized(fn, token, initializer, initargs, key)

    return wrap


class _AuthKey:
    """Unpickles to None, setting the process's ``multiprocessing`` authkey on the way."""

    __slots__ = ("key",)

    def __init__(self, key: bytes) -> None:
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:
        return (_set_authkey, (self.key,))


def _set_authkey(key: bytes) -> bytes:
    multiprocessing.current_process().authkey = key
    return key


class _WithKey:
    """Unpickles to the function itself (no cost per call); the key is set first."""

    __slots__ = ("key", "fn")

    def __init__(self, key: _AuthKey | None, fn: Callable[..., Any]) -> None:
        self.key, self.fn = key, fn

    def __reduce__(self) -> tuple[Any, ...]:
        return (_second, (self.key, self.fn))  # arguments unpickle in order: the key first


def _second(key: bytes | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    _inherit(None, (), "", key)
    return fn


class Initialized:
    """``fn`` behind an executor's initializer, as a worker calls it."""

    __slots__ = ("fn", "token", "initializer", "initargs", "key")

    def __init__(self, fn: Callable[..., Any], token: str, initializer: Callable[..., object],
                 initargs: tuple[Any, ...], key: _AuthKey | None = None) -> None:
        self.fn, self.token, self.initializer, self.initargs = fn, token, initializer, initargs
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:
        # the key first: it is set before the function and the initargs are unpickled
        return (_initialized, (self.key, self.fn, self.token, self.initializer, self.initargs))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        token = self.token
        if token not in _state:
            try:
                self.initializer(*self.initargs)
            except BaseException as exc:  # noqa: BLE001 - reported with every task here
                _state[token] = exc
            else:
                _state[token] = None
        err = _state[token]
        if err is not None:
            from shoal.task.errors import InitializerError

            raise InitializerError("A worker initializer failed, the executor is not usable "
                                   f"anymore: {type(err).__name__}: {err}") from err
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return getattr(self.fn, "__qualname__", None) or repr(self.fn)


def _initialized(key: bytes | None, fn: Callable[..., Any], token: str,
                 initializer: Callable[..., object], initargs: tuple[Any, ...]) -> Initialized:
    _inherit(initializer, initargs, token, key)
    return Initialized(fn, token, initializer, initargs)


def _inherit(initializer: Callable[..., object] | None, initargs: tuple[Any, ...], token: str,
             key: bytes | None) -> None:
    """In a worker: its sub-tasks get the wrap of the executor whose function arrived."""
    from shoal.task import context

    wc = context.current()
    enc = getattr(wc, "encoder", None)
    if enc is not None and enc.wrap is None:
        enc.wrap = wrapper(initializer, initargs, token, key)
