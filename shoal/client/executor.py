"""The client API: :class:`Executor`, a real ``concurrent.futures.Executor``.

``submit`` only encodes the call and appends it to a pending list; one I/O thread per
executor sends everything pending as one SUBMIT message and resolves futures from
RESULTS messages, so neither direction costs a round trip or a message per task.

The I/O thread also keeps the head in sight: it sends HEARTBEAT when it sent nothing
for ``heartbeat_s`` (from WELCOME), and when the head is silent past ``timeout_s`` (or,
for the local default, its process exits) every pending future fails with
:class:`HeadLost`, as does every later submit.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import dataclasses
import heapq
import itertools
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from shoal.client import options as O
from shoal.client.link import HEARTBEAT_S, TIMEOUT_S, HeadLink
from shoal.client.results import ordered_results, wait_all

if TYPE_CHECKING:
    from shoal.launch.allocation import Allocation
    from shoal.launch.launchers import Launcher
    from shoal.task.command import Command
    from shoal.task.errors import HeadLost

__all__ = ["AgentInfo", "Executor", "ExecutorError", "HeadLost"]

SCHEDULES = ("dynamic", "static")
_NO_DEPS: list[int] = []  # shared by every task without dependencies: never mutated



def _load_client() -> None:
    """Import what the client needs past its start (ZeroMQ, the protocol,
    multiprocessing...): ``Executor()`` calls it before it starts a local runtime, whose
    processes then inherit these modules (forked) rather than import them a second time."""
    global zmq, MapProgress, progress_delay, progress_setting, init_wrapper
    global EncodeError, Encoder, ExecutorError, ShoalFuture, P
    global PeerSession, retry_soon, secure_client, server_key, Command
    import zmq

    from shoal.client.progress import MapProgress, progress_delay, progress_setting
    from shoal.client.workerinit import wrapper as init_wrapper
    from shoal.task.codec import EncodeError, Encoder
    from shoal.task.command import Command
    from shoal.task.errors import ExecutorError
    from shoal.task.future import ShoalFuture
    from shoal.transport import protocol as P
    from shoal.transport.session import PeerSession, retry_soon, secure_client, server_key


def __getattr__(name: str) -> Any:  # the names exported before an Executor loaded them
    if name in ("ExecutorError", "HeadLost", "Command"):
        _load_client()
        if name == "HeadLost":  # made on first use (see shoal.task.errors)
            from shoal.task.errors import HeadLost

            return HeadLost
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_live: weakref.WeakSet[Executor] = weakref.WeakSet()
_global_shutdown = False  # the interpreter is exiting: no new tasks (see _python_exit)


@dataclasses.dataclass(frozen=True)
class AgentInfo:
    """An agent (one per node) connected to the head; ``name`` is what placement takes."""

    name: str
    host: str
    slots: int
    pid: int = 0
    gpus: int = 0     # GPUs it offers
    memory: int = 0   # bytes it offers (0: memory is not counted there)
    node: str = ""    # the node name launchers use (Slurm's node name, else the host name)


class Executor(HeadLink, cf.Executor):
    """Run Python calls and commands as tasks on a shoal runtime.

    ``Executor()`` is the embedded local default: a head and one agent on this machine
    with one warm worker per core, stopped and cleaned up by :meth:`shutdown`, on exit,
    and when this process dies. ``Executor(connect="run.json")`` joins a running head
    (see ``shoal head`` and ``shoal agent``) instead.

    :param max_workers: warm Python workers of the local agent (default: one per core),
        > 0 as for ``concurrent.futures``; ``workers=`` is the same, and may be 0 (an agent
        for commands only).
    :param initializer: called as ``initializer(*initargs)`` once in each worker process
        before the first of this executor's Python tasks there; if it raises, the executor
        is broken (``_broken``): pending and later tasks fail with :class:`InitializerError`
        (a ``BrokenProcessPool``), as with ``ProcessPoolExecutor``.
    :param initargs: arguments of ``initializer``.
    :param slots: cores of the local agent (default: ``max_workers``, or the core count).
    :param schedule: ``"dynamic"`` (tasks pulled as slots free up) or ``"static"`` (each
        ``map`` is split into contiguous blocks, one per slot, up front).
    :param prefetch: tasks queued per slot beyond the one running (dynamic schedule).
    :param connect: path of a connection file written by ``shoal head``.
    :param retries: extra attempts of every task whose attempt failed (an exception, a
        non-zero exit with ``check``, lost, timed out); :meth:`options` overrides it.
    :param task_timeout: seconds one attempt of every task may run before it is killed
        and fails with :class:`TaskTimeout` (or is retried); :meth:`options` overrides it.
    :param heartbeat_timeout: seconds of silence after which the local head declares a
        peer lost (default 8); the head's ``--heartbeat-timeout`` in connect mode.
    :param crash_limit: attempts in a row that may kill their worker or agent before the
        task fails with :class:`TaskLost` (default 3); the head's ``--crash-limit``.
    :param journal: SQLite file of the local head's journal: a rerun of the same program
        skips the tasks it finished and takes their results from it (every task gets a
        key, see :mod:`shoal.transport.keys`); the head's ``--journal`` in connect mode.
    :param trace: file in which the local head records every attempt of every task (where,
        when, which cores; ``shoal trace FILE`` and :mod:`shoal.trace` report on it, see
        docs/trace.md); the head's ``--trace`` in connect mode.
    :param allocation: the nodes to run on (``shoal.launch.allocation.Allocation``): one
        agent per node, the head here (docs/cluster.md). Default: the batch allocation this
        process runs in, discovered (``discover()``), else the local default; ``False``:
        the local default even inside an allocation.
    :param launcher: how agents start on the nodes (``"srun"``, ``"mpirun"``, ``"pbsdsh"``,
        ``"ssh"``, ``"local"`` or a ``Launcher``); default: the allocation kind's.
    :param interface: network interface whose address the head listens on (default: this
        host's name resolved, else its default route's address).
    :param gpus: GPUs the local default's agent offers (its ``--gpus``; default: those it
        detects); ``shoal agent --gpus`` in connect mode; in an allocation each node's
        agent finds the job's. See docs/resources.md.
    :param memory: memory the local default's agent offers, in bytes or as ``"64G"`` (its
        ``--memory``; default: not counted); ``shoal agent --memory`` in connect mode.
    :param min_agents: wait (up to ``start_timeout``) until this many agents have joined
        before returning, so the first tasks spread over all of them (see
        :meth:`wait_for_agents`).
    :param prolog: shell script each agent sources at its start, on its node; its workers
        and commands inherit the environment it exports (SCOOP's ``--prolog``; see
        :mod:`shoal.launch.workenv`). A failing one is a one-line ``PrologError``.
    :param pythonpath: directories put first on the workers' import path and the agents'
        ``PYTHONPATH`` (one, a ``"a:b"`` string, or a list), not on this process's.
    :param workdir: the directory agents, their workers and commands run in (default:
        this one; a command's ``cwd=`` wins).
    :param progress: a live progress line on stderr for each :meth:`map` (done, running,
        failed, queued, rate, ETA; :mod:`shoal.client.progress`): ``None`` (default) when
        stderr is a terminal and the map has not finished within a second and a half
        (``SHOAL_PROGRESS=0``/``1`` in the environment: never/always), ``True`` always,
        ``False`` never; ``map(progress=)`` overrides it.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        workers: int | None = None,
        slots: int | None = None,
        schedule: str = "dynamic",
        prefetch: int = 1,
        connect: str | None = None,
        start_timeout: float = 60.0,
        retries: int = 0,
        task_timeout: float | None = None,
        heartbeat_timeout: float | None = None,
        crash_limit: int | None = None,
        journal: str | os.PathLike[str] | None = None,
        trace: str | os.PathLike[str] | None = None,
        allocation: Allocation | bool | None = None,
        launcher: Launcher | str | None = None,
        interface: str | None = None,
        gpus: int | None = None,
        memory: int | str | None = None,
        min_agents: int | None = None,
        prolog: str | os.PathLike[str] | None = None,
        pythonpath: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        progress: bool | None = None,
    ) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {schedule!r}")
        if max_workers is not None:
            if isinstance(max_workers, bool) or not isinstance(max_workers, int):
                raise TypeError(f"max_workers must be an int, not {max_workers!r}")
            if max_workers <= 0:
                raise ValueError("max_workers must be greater than 0")
            if workers is not None and workers != max_workers:
                raise ValueError(f"max_workers={max_workers} and workers={workers}: give one")
            workers = max_workers
        if workers is not None and workers < 0:
            raise ValueError("workers must be >= 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        initargs = tuple(initargs)
        self._opts = O.task_opts(O.retries_value(retries), None,
                                 None if task_timeout is None else O.timeout_value(task_timeout, "task_timeout"))
        if heartbeat_timeout is not None:
            O.timeout_value(heartbeat_timeout, "heartbeat_timeout")
        if crash_limit is not None and (isinstance(crash_limit, bool) or not isinstance(crash_limit, int)
                                        or crash_limit < 1):
            raise ValueError(f"crash_limit must be an int >= 1, not {crash_limit!r}")
        if journal is not None:
            journal = os.fspath(journal)
            if not journal:
                raise ValueError("journal must be a file path, not ''")
        if trace is not None:
            trace = os.fspath(trace)
            if not trace:
                raise ValueError("trace must be a file path, not ''")
        if connect is not None:
            given = [f"{name}=" for name, v in (("heartbeat_timeout", heartbeat_timeout),
                                                ("crash_limit", crash_limit), ("journal", journal),
                                                ("trace", trace))
                     if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)} set the head's policy: with connect=, give them "
                                 "to `shoal head` (--heartbeat-timeout, --crash-limit, --journal, "
                                 "--trace)")
            if allocation or launcher is not None or interface is not None:
                raise ValueError("allocation=, launcher= and interface= start agents: with "
                                 "connect=, the head's agents are started by hand")
            if gpus is not None or memory is not None:
                raise ValueError("gpus= and memory= describe the local agent: with connect=, give "
                                 "them to each `shoal agent` (--gpus, --memory)")
            if prolog is not None or pythonpath is not None or workdir is not None:
                raise ValueError("prolog=, pythonpath= and workdir= set up the agents this "
                                 "executor starts: with connect=, set up each agent's environment "
                                 "where you start it")
        if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0):
            raise ValueError(f"gpus must be an int >= 0, not {gpus!r}")
        if memory is not None:
            memory = O.memory_value(memory)
        if min_agents is not None:
            O.count_value(min_agents, "min_agents")
        self._static = schedule == "static"
        if progress is not None and not isinstance(progress, bool):  # progress_setting's check
            raise ValueError(f"progress must be True, False or None (automatic), not {progress!r}")
        self._cluster = None
        if connect is None:  # the local default, or the whole allocation this runs in
            # before the runtime starts: its processes, forked from this one when it can
            # fork, inherit ZeroMQ, msgpack and the codec instead of importing them again
            # while this process imports them too (a cold start is CPU-bound on 2 cores)
            _load_client()
            if workers != 0:  # its workers pickle results: cloudpickle, imported once here
                from shoal.task import codec

                codec.preload()
            from shoal.launch.runtime import start_runtime
            from shoal.launch.workenv import WorkerEnv

            self._cluster = start_runtime(
                workers=workers, slots=slots, prefetch=prefetch,
                heartbeat_timeout=heartbeat_timeout, crash_limit=crash_limit,
                journal=journal, allocation=allocation, launcher=launcher, interface=interface,
                gpus=gpus, memory=memory, trace=trace, probe=_JoinProbe,
                worker_env=WorkerEnv.make(prolog, pythonpath, workdir))
            conn = self._cluster.connection
            self._slots = self._cluster.slots
        else:
            from shoal.transport.connfile import Connection

            conn = Connection.read(connect)
            self._slots = 0
            _load_client()
        self._progress = progress_setting(progress)
        self._conn = conn
        self._codec = PeerSession(conn.key)  # its HELLO opens the session (see transport.session)
        self._lock = threading.Lock()
        self._fcond = threading.Condition(threading.RLock())  # shared by all our futures
        self._pending: list[list[Any]] = []
        self._pending_static: list[list[Any]] = []
        self._futures: dict[int, ShoalFuture] = {}
        self._agent_names: dict[int, str] = {}
        self._requests: list[tuple[list[Any], threading.Event, list[Any]]] = []
        self._req_ids = itertools.count(1)
        self._waiting_replies: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._cancelling: dict[int, threading.Event] = {}  # tid -> its cancel() in flight
        self._journal = journal is not None  # or a `shoal head --journal` says so on WELCOME
        self._heartbeat_s = HEARTBEAT_S
        self._timeout_s = TIMEOUT_S
        self._shutdown = False
        self._closed = False
        self._error: BaseException | None = None
        self._broken: str | bool = False  # as ProcessPoolExecutor's: why, once broken
        # the caller's multiprocessing authkey goes only to the workers of a runtime this
        # executor started (Manager proxies connect back with it; see workerinit)
        import multiprocessing
        import secrets

        self._wrap = init_wrapper(
            initializer, initargs, secrets.token_hex(8),
            bytes(multiprocessing.current_process().authkey) if connect is None else None)
        self._io_sleeping = False
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._welcome = threading.Event()
        self._client_num: int | None = None  # from WELCOME: shoal.shared files constants by it
        self._terminated = threading.Event()
        self._encoder: Encoder | None = None
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.IDENTITY, f"client-{os.getpid()}-{id(self):x}".encode())
        self._sock.setsockopt(zmq.SNDHWM, 0)
        self._sock.setsockopt(zmq.RCVHWM, 0)
        self._sock.setsockopt(zmq.LINGER, 1000)
        retry_soon(self._sock, conn.address)  # the local head binds while we connect
        secure_client(self._sock, server_key(conn))  # CURVE when the run encrypts
        self._sock.connect(conn.address)
        self._thread = threading.Thread(target=self._io_loop, name="shoal-client-io", daemon=True)
        self._thread.start()
        if not self._welcome.wait(start_timeout):
            self._terminate()
            where = "the local head" if self._cluster else f"the head at {conn.address}"
            raise ExecutorError(f"no answer from {where} within {start_timeout:.0f} s")
        if self._error is not None:
            self._terminate()
            raise self._error
        _live.add(self)
        if min_agents is not None:
            from shoal.launch.local import LocalCluster

            try:
                if isinstance(self._cluster, LocalCluster) and min_agents > 1:
                    raise ValueError(f"min_agents={min_agents}: the local default has one agent "
                                     "(give connect= to join a head with more)")
                self.wait_for_agents(min_agents, timeout=start_timeout)
            except BaseException:
                self._terminate()
                raise

    # ---- public API ---------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any] | Command, /, *args: Any, **kwargs: Any) -> ShoalFuture:
        """Schedule ``fn(*args, **kwargs)`` (or a :class:`Command`); returns its future."""
        return self._submit(fn, args, kwargs, (), 1, None, self._opts, None)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int | None = None,
        progress: bool | None = None,
    ) -> Iterator[Any]:
        """Like :meth:`concurrent.futures.Executor.map`; results in order.

        ``chunksize=None`` groups items so each slot gets about four chunks (what
        ``multiprocessing.Pool.map`` does); ``chunksize=1`` sends one task per item.
        ``progress``: show a live progress line on stderr (see the executor's
        ``progress``; None: the executor's setting).
        """
        return self._map(fn, iterables, timeout, chunksize, (), 1, None, self._opts, progress)

    def options(
        self,
        *,
        after: Sequence[cf.Future] = (),
        cores: int = 1,
        agent: str | None = None,
        prefer: str | None = None,
        retries: int | None = None,
        retry_on: type[BaseException] | Sequence[type[BaseException]] | None = None,
        timeout: float | None = None,
        key: str | None = None,
        gpus: int | None = None,
        memory: int | str | None = None,
        ranks: int | None = None,
        nodes: int | None = None,
        exclusive: bool = False,
        estimate: float | str | None = None,
    ) -> _Options:
        """Submit with options: ``ex.options(after=[f1, f2], cores=2).submit(fn, x)``.

        ``after``: futures of this executor that must succeed first; if one fails or is
        cancelled, the task is not run and its future raises :class:`DependencyError`.
        ``agent``: run only on the agent of that name (see :meth:`agents`); the task
        fails if no such agent is connected and is lost if it leaves.
        ``prefer``: run on that agent when it has room, elsewhere only when another
        agent would otherwise idle (e.g. the node that holds the task's input files).
        ``retries``: extra attempts after a failed one (default: the executor's
        ``retries``), with backoff; the final error notes every attempt.
        ``retry_on``: exception classes that are retried (others fail at once; lost and
        timed-out attempts are always retried while retries are left).
        ``timeout``: seconds one attempt may run (default: the executor's
        ``task_timeout``); past it the attempt is killed and fails with :class:`TaskTimeout`.
        ``key``: the task's identity in the journal (default: derived from the call, see
        :mod:`shoal.transport.keys`); give it to ``submit``, it names one task.

        Resources (docs/resources.md); a task runs only on an agent that can hold all of
        them at once, and a request no agent can ever hold fails at submission:
        ``cores``: cores the task occupies (per rank for an MPI task); the agent binds it
        to them and sets ``OMP_NUM_THREADS``.
        ``gpus``: GPUs (per rank); the task sees only its own (``CUDA_VISIBLE_DEVICES``...).
        ``memory``: bytes, or a size such as ``"512M"``, ``"4G"``, ``"1.5GiB"`` (per rank).
        ``ranks``: run a :class:`Command` as an MPI job of that many ranks (mpirun or srun
        over exactly the hosts and slots shoal reserves for it, all at once).
        ``nodes``: with ``ranks``, spread the ranks over exactly that many agents.
        ``exclusive``: the task's agent(s) run nothing else meanwhile.

        ``estimate``: about how long the task runs (seconds, or ``"5m"``, ``"2h"``). Not a
        limit: tasks with estimates start longest first, which shortens the run's tail,
        and one estimated at 1 s or more goes only to a free core, never queued behind
        another on an agent (docs/sim.md, "stated run times").
        """
        if agent is not None and prefer is not None:
            raise ValueError("give agent= or prefer=, not both")
        place = [agent, True] if agent is not None else [prefer, False] if prefer is not None else None
        default = self._opts or {}
        opts = O.task_opts(
            default.get("retries", 0) if retries is None else O.retries_value(retries),
            retry_on,
            default.get("timeout") if timeout is None else O.timeout_value(timeout),
        )
        if key is not None:
            O.task_opts(None, None, None, key)  # validates
        res = O.resource_opts(gpus, memory, ranks, nodes, exclusive)
        if estimate is not None:
            res = {**(res or {}), "estimate": O.estimate_value(estimate)}
        if res:
            opts = {**opts, **res} if opts else res
        return _Options(self, tuple(after), cores, place, opts, key, ranks is not None)

    def agents(self, timeout: float = 10.0) -> list[AgentInfo]:
        """The agents connected to the head now (one per node), in the order they joined."""
        infos = self._request([P.AGENTS], timeout)[0]
        with self._lock:
            for a in infos:
                self._agent_names[a["num"]] = a["name"]
        return [AgentInfo(a["name"], a["host"], a["slots"], a["pid"], int(a.get("gpus") or 0),
                          int(a.get("memory") or 0), str(a.get("node") or a["host"]))
                for a in infos]

    def wait_for_agents(self, n: int, timeout: float | None = None) -> list[AgentInfo]:
        """Wait until at least ``n`` agents are connected; returns them (see :meth:`agents`).

        Call it before submitting when agents start alongside the program (e.g. one per
        node of an allocation), so the first tasks are not all sent to the first agent.
        Raises :class:`TimeoutError` after ``timeout`` seconds (None: wait for ever),
        saying how many joined and which.
        """
        O.count_value(n, "n")
        if timeout is not None:
            O.timeout_value(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.02
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            found = self.agents(timeout=10.0 if left is None else max(0.5, min(10.0, left)))
            if len(found) >= n:
                return found
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                who = ", ".join(f"{a.name} on {a.node or a.host}" for a in found) or "none"
                raise TimeoutError(f"waited {timeout:g} s for {n} agent{'s' * (n != 1)} at "
                                   f"{self._conn.address}: {len(found)} joined ({who})")
            time.sleep(pause if left is None else min(pause, left))
            pause = min(0.25, pause * 2)

    def _agent_name(self, num: int) -> str | None:
        name = self._agent_names.get(num)
        # (not from the I/O thread, e.g. in a done callback: it answers requests itself)
        if name is None and not self._closed and threading.current_thread() is not self._thread:
            try:
                self.agents()
            except ExecutorError:
                return None
            name = self._agent_names.get(num)
        return name

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._shutdown and self._closed:
                return
            self._shutdown = True
        if cancel_futures:
            futs = [f for f in list(self._futures.values()) if not f.done()]
            if futs:  # as concurrent.futures does: what already runs finishes, and so do
                # the first queued tasks, one per slot (ProcessPoolExecutor's call queue),
                # sent or not: none may have started yet when the workers are still warming.
                # No slots known (a head with no agent yet): nothing is left to run.
                self._cancel(futs, queued_only=True, keep_first=self._slots)
                for f in futs:
                    if f.tid not in self._futures:
                        f._settle(None, None, cancelled=True)
        if wait:
            outstanding = [f for f in list(self._futures.values()) if not f.done()]
            if outstanding:
                wait_all(outstanding)
            self._terminate()
        else:
            threading.Thread(target=self._finish_later, daemon=True).start()

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        """Counters of the head: agents, slots, queued/live/completed tasks."""
        return self._request([P.STATS], timeout)[0]

    def status(self, failures: int = 20, agents: bool = True, timeout: float = 10.0) -> dict[str, Any]:
        """The head's view now, as ``shoal status`` shows it (docs/status.md): :meth:`stats`
        plus tasks running and dispatched, the queue (``ready``, ``waiting`` on
        dependencies, in retry ``backoff``), ``failed`` tasks, the completion ``rate``
        (tasks/s over ~10 s), each agent's load (``agent_list``, when ``agents``) and the
        newest ``failures`` failed attempts (task, agent, attempt, why, time)."""
        O.retries_value(failures, "failures")  # an int >= 0
        return self._request([P.STATS, None, {"failures": failures, "agents": bool(agents)}],
                             timeout)[0]

    @property
    def journal_keys(self) -> bool:
        """True when this run has a journal (``journal=``, or a ``shoal head --journal``
        that said so when this executor joined): the head keys its tasks."""
        return self._journal

    @property
    def slots(self) -> int:
        """Cores known to the head when this executor joined (or of the local agent)."""
        return self._slots

    # ---- submission internals -------------------------------------------------------------
    def _submit(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                after: tuple[cf.Future, ...], cores: int, place: list[Any] | None,
                opts: dict[str, Any] | None, key: str | None) -> ShoalFuture:
        deps, failed = _dep_ids(self, after) if after else (_NO_DEPS, None)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if _global_shutdown:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            if self._error is not None:
                raise self._error
            enc = self._encoder
            try:
                if isinstance(fn, Command):
                    if args or kwargs:
                        raise TypeError("a Command takes no arguments")
                    spec = enc.command(fn, deps)
                else:
                    spec = enc.call(fn, args, kwargs, deps, cores)
            except (EncodeError, ValueError) as exc:
                fut = ShoalFuture(enc.next_tid(), self)
                fut.set_exception(exc)
                return fut
            tid = spec[0]
            fut = ShoalFuture(tid, self)
            if failed is not None:
                fut.set_exception(failed)
                return fut
            if key is not None:  # a given key; the head derives the others (transport.keys)
                opts = {"key": key} if opts is None else {**opts, "key": key}
            if opts is not None:
                spec += (place, opts)
            elif place is not None:
                spec.append(place)
            self._futures[tid] = fut
            (self._pending_static if self._static else self._pending).append(spec)
            wake_io = self._io_sleeping
            self._io_sleeping = False
        if wake_io:
            os.eventfd_write(self._efd, 1)
        return fut

    def _map(self, fn: Callable[..., Any], iterables: tuple[Iterable[Any], ...],
             timeout: float | None, chunksize: int | None,
             after: tuple[cf.Future, ...], cores: int, place: list[Any] | None,
             opts: dict[str, Any] | None, progress: bool | None = None) -> Iterator[Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        # seconds before the progress line shows (None: no progress line)
        delay = progress_delay(self._progress if progress is None else progress_setting(progress))
        items = list(zip(*iterables, strict=False))
        if chunksize is None:
            chunksize = max(1, math.ceil(len(items) / (4 * max(1, self._slots))))
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        deps, failed = _dep_ids(self, after) if after else (_NO_DEPS, None)
        futs: list[ShoalFuture] = []
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if _global_shutdown:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            if self._error is not None:
                raise self._error
            enc = self._encoder
            out = self._pending_static if self._static else self._pending
            for start in range(0, len(items), chunksize):
                part = items[start : start + chunksize]
                try:
                    if chunksize == 1:
                        spec = enc.call(fn, part[0], {}, deps, cores)
                    else:
                        spec = enc.chunk(fn, part, cores)
                        spec[4] = deps
                except EncodeError as exc:
                    fut = ShoalFuture(enc.next_tid(), self)
                    fut.set_exception(exc)
                    futs.append(fut)
                    continue
                fut = ShoalFuture(spec[0], self)
                if opts is not None:
                    spec += (place, opts)
                elif place is not None:
                    spec.append(place)
                if failed is not None:
                    fut.set_exception(failed)
                else:
                    self._futures[spec[0]] = fut
                    out.append(spec)
                futs.append(fut)
            wake_io = self._io_sleeping
            self._io_sleeping = False
        if wake_io:
            os.eventfd_write(self._efd, 1)
        view = None
        if delay is not None and futs:  # off (None) unless on a terminal, or asked for
            view = MapProgress(self, futs, chunksize, len(items), fn, delay)
        return ordered_results(futs, deadline, chunksize > 1, view)

    # ---- owner hooks used by ShoalFuture ----------------------------------------------------
    def _cancel(self, futs: list[ShoalFuture], queued_only: bool = False,
                keep_first: int = 0) -> bool:
        """Drop the tasks of ``futs``: those not sent yet here, the others through the
        head (which stops them where they run, unless ``queued_only``). True when the head
        says it stopped or dropped them (for one future: that one; for many: at least one).
        ``keep_first``: the first that many tasks of ``futs`` (in submission order, sent or
        not) are left to run (shutdown)."""
        tids = {f.tid for f in futs}
        # tids count up in submission order
        keep = set(heapq.nsmallest(keep_first, tids)) if keep_first else set()
        with self._lock:
            removed: set[int] = set()
            kept: list[list[Any]] = []
            kept_static: list[list[Any]] = []
            for specs, out in ((self._pending, kept), (self._pending_static, kept_static)):
                for spec in specs:
                    if spec[0] in tids and spec[0] not in keep:
                        removed.add(spec[0])
                    else:
                        out.append(spec)
            self._pending, self._pending_static = kept, kept_static
            for t in removed:  # never sent: the head cannot answer for them
                self._futures.pop(t, None)
        remote = tids - removed - keep
        if not remote:
            return bool(removed)
        if len(futs) == 1:  # one cancel() per task at a time: the others take its answer
            with self._lock:
                ev = self._cancelling.get(futs[0].tid)
                if ev is None:
                    self._cancelling[futs[0].tid] = threading.Event()
            if ev is not None:
                ev.wait(35.0)
                return futs[0].cancelled()
        try:
            msg = [P.CANCEL, None, sorted(remote), True] if queued_only else [P.CANCEL, None, sorted(remote)]
            try:
                done = set(self._request(msg, 30.0)[0])
            except ExecutorError:
                return bool(removed)
            for t in done:
                self._futures.pop(t, None)
            if len(futs) > 1:  # bulk (shutdown): mark what the head dropped
                return bool(done or removed)
            if futs[0].tid in done:
                futs[0]._settle(None, None, cancelled=True)  # before the others read it
                return True
            if queued_only:  # the answer is exact: it started (or just finished)
                futs[0]._mark_running()
            return False
        finally:
            if len(futs) == 1:
                with self._lock:
                    ev = self._cancelling.pop(futs[0].tid, None)
                if ev is not None:
                    ev.set()

    def _started(self, futs: list[ShoalFuture]) -> bool:
        """Whether the task of ``futs[0]`` has started (``Future.running()``): asks the
        head, which asks the agent holding it. False when nobody can tell."""
        try:
            return futs[0].tid in set(self._request([P.STATE, None, [futs[0].tid]], 30.0)[0])
        except ExecutorError:
            return False

    def _finish_later(self) -> None:
        outstanding = [f for f in list(self._futures.values()) if not f.done()]
        if outstanding:
            wait_all(outstanding)
        self._terminate()

    def _terminate(self) -> None:
        with self._lock:
            first = not self._closed
            self._closed = True
        if not first:  # another thread is stopping it: return once it is stopped
            self._terminated.wait(15.0)
            return
        try:
            self._stop_all()
        finally:
            self._terminated.set()

    def _stop_all(self) -> None:
        os.eventfd_write(self._efd, 1)
        self._thread.join(5.0)
        try:
            msg = [P.SHUTDOWN] if self._cluster is not None else [P.BYE, "client done"]
            self._sock.send_multipart(self._codec.encode(msg), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        self._sock.close(linger=500)
        self._ctx.term()
        os.close(self._efd)
        if self._cluster is not None:
            self._cluster.stop()
        self._fail_all(ExecutorError("executor is shut down"))
        _live.discard(self)


class _JoinProbe:
    """A second client of an allocation's head while its agents join (the launch layer's
    ``JoinProbe``): only lists them, and leaves without stopping the head."""

    def __init__(self, connfile: str, timeout: float) -> None:
        self._ex = Executor(connect=connfile, start_timeout=timeout)

    def agents(self) -> list[AgentInfo]:
        return self._ex.agents()

    def close(self) -> None:
        self._ex.shutdown(wait=False)
        self._ex._terminate()


class _Options:
    """Submission with dependencies, resources and failure options; see :meth:`Executor.options`."""

    def __init__(self, ex: Any, after: tuple[cf.Future, ...], cores: int,
                 place: list[Any] | None = None, opts: dict[str, Any] | None = None,
                 key: str | None = None, mpi: bool = False) -> None:
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise ValueError(f"cores must be an int >= 1, not {cores!r}")
        self._ex, self._after, self._cores, self._place = ex, after, cores, place
        self._opts, self._key, self._mpi = opts, key, mpi

    def submit(self, fn: Callable[..., Any] | Command, /, *args: Any, **kwargs: Any) -> ShoalFuture:
        """Like :meth:`Executor.submit`, with these options."""
        if self._mpi and not isinstance(fn, Command):
            raise ValueError(f"ranks= runs a Command through MPI (mpirun/srun launch a program), "
                             f"not a Python function ({getattr(fn, '__qualname__', fn)!r}): "
                             "submit Command([...]) instead")
        if isinstance(fn, Command) and self._cores != 1 and fn.cores == 1:
            fn = dataclasses.replace(fn, cores=self._cores)
        return self._ex._submit(fn, args, kwargs, self._after, self._cores, self._place,
                                self._opts, self._key)

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None,
            chunksize: int | None = None, progress: bool | None = None) -> Iterator[Any]:
        """Like :meth:`Executor.map`, with these options (not ``key``: it names one task)."""
        if self._key is not None:
            raise ValueError("options(key=...) names one task: use it with submit, not map")
        if self._mpi:
            raise ValueError("ranks= runs a Command through MPI: use it with submit(Command(...)), "
                             "not map")
        return self._ex._map(fn, iterables, timeout, chunksize, self._after, self._cores,
                             self._place, self._opts, progress)


def _dep_ids(ex: Any, after: tuple[cf.Future, ...]) -> tuple[list[int], BaseException | None]:
    """Task ids to wait for; a dependency that already failed fails the task at once."""
    from shoal.task.errors import DependencyError

    deps: list[int] = []
    for f in after:
        if not isinstance(f, ShoalFuture) or f._owner is not ex:
            raise ValueError("after= takes futures returned by this executor")
        if f.done():
            if f.cancelled() or f.exception() is not None:
                return deps, DependencyError(f"dependency task {f.tid} failed or was cancelled")
            continue
        deps.append(f.tid)
    return deps or _NO_DEPS, None


def _python_exit() -> None:
    """At interpreter exit, before atexit hooks (as concurrent.futures does): refuse new
    tasks, and wait for every live executor's pending tasks before stopping it, also of
    those shut down with ``wait=False``."""
    global _global_shutdown
    _global_shutdown = True
    for ex in list(_live):
        try:
            ex._finish_later()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


threading._register_atexit(_python_exit)  # type: ignore[attr-defined]


@atexit.register
def _shutdown_all() -> None:  # what _python_exit did not finish (e.g. it was interrupted)
    for ex in list(_live):
        try:
            ex.shutdown(wait=False, cancel_futures=True)
            ex._terminate()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass
