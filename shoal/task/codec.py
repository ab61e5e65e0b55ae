"""Turning calls and commands into task tuples (shared by clients and tasks in workers).

A function is pickled once per submitter and travels once per hop (the head and agents
cache it by id); a task carries only its function id and its pickled arguments.

cloudpickle is imported at the first :func:`dumps` (or :func:`preload`), not with this
module: commands (``shoal run``) never need it, and its import is ~3 ms of a cold start.
"""

from __future__ import annotations

import io
import pickle
import types
import weakref
from collections import ChainMap
from collections.abc import Callable
from typing import Any

from shoal.task.command import CAPTURE, Command
from shoal.transport import protocol as P
from shoal.transport.keys import qualified_name


class EncodeError(TypeError, pickle.PicklingError):
    """A function or an argument of a task cannot be sent to a worker (unpicklable); a
    ``pickle.PicklingError``, as ``ProcessPoolExecutor`` raises for it."""


class Encoder:
    """Allocates task and function ids for one origin and pickles what tasks carry."""

    def __init__(self, origin: int, wrap: Callable[[Callable[..., Any]], Any] | None = None) -> None:
        self.origin = origin << 32
        self.seq = 0
        self.wrap = wrap  # what workers get in place of each function (shoal.client.workerinit)
        # id(fn) -> (a weak reference to fn, its fid): a function that is gone is forgotten
        # (its id may be reused), and a task does not keep its function alive
        self._fids: dict[int, tuple[Callable[[], Any], int]] = {}
        self.new_funcs: dict[int, bytes] = {}
        self.new_names: dict[int, str] = {}  # fid -> "module.qualname": the head's journal keys

    def next_tid(self) -> int:
        self.seq += 1
        return self.origin | self.seq

    def fid(self, fn: Callable[..., Any]) -> int:
        entry = self._fids.get(id(fn))
        if entry is not None and entry[0]() is fn:
            return entry[1]
        try:
            blob = dumps(fn if self.wrap is None else self.wrap(fn))
        except Exception as exc:  # noqa: BLE001 - any failure: name the function
            raise EncodeError(f"cannot send function {_name(fn)} to a worker: {exc}") from exc
        fid = self.next_tid()
        self._fids[id(fn)] = (_ref(fn, self._fids), fid)
        self.new_funcs[fid] = blob
        self.new_names[fid] = qualified_name(fn)
        return fid

    def take_funcs(self) -> dict[int, bytes]:
        funcs, self.new_funcs = self.new_funcs, {}
        self.new_names = {}
        return funcs

    def take_funcs_and_names(self) -> tuple[dict[int, bytes], dict[int, str]]:
        """The functions not sent yet, and their qualified names (SUBMIT's 5th field)."""
        funcs, self.new_funcs = self.new_funcs, {}
        names, self.new_names = self.new_names, {}
        return funcs, names

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             deps: list[int], cores: int) -> list[Any]:
        fid = self.fid(fn)
        try:
            if not kwargs and all(type(a) in _PLAIN for a in args):
                payload = _pdumps((args, kwargs), 5)  # builtins only: plain pickle is exact
            else:
                payload = dumps((args, kwargs))
        except Exception as exc:  # noqa: BLE001
            raise EncodeError(f"cannot send the arguments of {_name(fn)} to a worker: {exc}") from exc
        return [self.next_tid(), P.PY, fid, payload, deps, cores, -1]

    def chunk(self, fn: Callable[..., Any], items: list[tuple[Any, ...]], cores: int) -> list[Any]:
        fid = self.fid(fn)
        try:
            payload = dumps(items)
        except Exception as exc:  # noqa: BLE001
            raise EncodeError(f"cannot send the arguments of {_name(fn)} to a worker: {exc}") from exc
        return [self.next_tid(), P.CHUNK, fid, payload, [], cores, -1]

    def command(self, cmd: Command, deps: list[int]) -> list[Any]:
        if cmd.cores < 1:
            raise ValueError(f"a command needs at least 1 core, not {cmd.cores}")
        # only what differs from the defaults travels (the agent reads it with .get)
        spec: dict[str, Any] = {"argv": cmd.argv()}
        if cmd.cwd is not None:
            spec["cwd"] = cmd.cwd
        if cmd.env:
            spec["env"] = dict(cmd.env)
        if cmd.stdout != CAPTURE:
            spec["stdout"] = cmd.stdout
        if cmd.stderr != CAPTURE:
            spec["stderr"] = cmd.stderr
        if cmd.stdin is not None:
            spec["stdin"] = cmd.stdin
        if cmd.check:
            spec["check"] = True
        return [self.next_tid(), P.CMD, 0, spec, deps, cmd.cores, -1]


_pdumps = pickle.dumps


def _make_pickler() -> type:
    """The pickler class of :func:`dumps`, made at its first use (module docstring)."""
    import cloudpickle

    cloudpickle_override = cloudpickle.Pickler.reducer_override
    cloudpickle_code_reduce = cloudpickle.Pickler.dispatch_table[types.CodeType]
    own_reduce: dict[type, Any] = {}  # metaclass -> its own __reduce__, or False

    def code_reduce(code: types.CodeType) -> Any:
        """cloudpickle's reduction of a code object, keeping its file name: cloudpickle
        3.1.3 writes ``<dynamic-code>`` there, and a remote traceback of a function sent
        by value (one defined in ``__main__``) then shows no source line."""
        fn, args = cloudpickle_code_reduce(code)
        return fn, tuple(code.co_filename if a == "<dynamic-code>" else a for a in args)

    class Pickler(cloudpickle.Pickler):
        """cloudpickle, except that a class whose metaclass defines its own ``__reduce__``
        is pickled by it. DEAP's ``creator`` classes are remade on each unpickling in a
        worker, so the one its tasks hold is no longer the module's: cloudpickle would
        then send that class by value, which their metaclass cannot be rebuilt from (a
        sub-task of a task holding DEAP individuals failed with "metaclass conflict")."""

        # one level of lookup, as cloudpickle's own (the pickler asks it for most objects)
        dispatch_table = ChainMap(  # type: ignore[misc]
            {types.CodeType: code_reduce}, *cloudpickle.Pickler.dispatch_table.maps)

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, type) and type(obj) is not type:
                own = own_reduce.get(type(obj))
                if own is None:
                    own = own_reduce[type(obj)] = next(
                        (k.__dict__["__reduce__"] for k in type(obj).__mro__
                         if k is not type and k is not object and "__reduce__" in k.__dict__),
                        False)
                if own:
                    return own(obj)
            return cloudpickle_override(self, obj)  # not super(): this runs for most objects

    return Pickler


_pickler: type | None = None


def preload() -> None:
    """Import cloudpickle now: before a process forks the ones that will pickle tasks."""
    global _pickler
    if _pickler is None:
        _pickler = _make_pickler()


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj, protocol=5)`` with a pickler that keeps metaclass reductions
    and code file names (:func:`_make_pickler`): how tasks, their results and shared
    constants are pickled."""
    if _pickler is None:
        preload()
    with io.BytesIO() as fh:
        _pickler(fh, protocol=5).dump(obj)  # type: ignore[misc]
        return fh.getvalue()


def _ref(fn: Any, fids: dict[int, Any]) -> Callable[[], Any]:
    """A weak reference to ``fn`` that drops its entry from ``fids`` when ``fn`` dies (a
    strong one for the few callables that take no weak reference)."""
    key = id(fn)

    def forget(ref: Any) -> None:
        entry = fids.get(key)
        if entry is not None and entry[0] is ref:
            del fids[key]

    try:
        return weakref.ref(fn, forget)
    except TypeError:
        return lambda: fn
_PLAIN = frozenset({int, float, str, bytes, bool, type(None), complex})


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
