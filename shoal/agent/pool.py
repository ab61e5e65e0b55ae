"""An agent's warm Python workers: fork, welcome, kill, replace, requeue.

A mixin of ``Agent`` (shoal.agent.agent). Each worker is forked from the agent (it starts
with what the agent imported), reaches the agent over a ROUTER socket, and shares one
``running_slots`` record per worker index with it: the agent task it runs now and since
when (int64 task id, float64 monotonic start). From that record the agent charges a
worker's death to the task that was running, exactly, and enforces time limits; and one
flag byte asks the worker to give back what it has queued (the drain).

Cancel of a task queued inside a worker (see ``Stopping._stop_tasks``): each task the agent
sends a worker carries its place in that worker's stream (``T_SEQ``); the worker records the
place of the last queued task it started (``STARTED``) before it starts it, and may not
start one at or past ``STOP_AT`` until it has read the CANCEL numbered ``CANCEL_KEY``. Both
sides read and write these under the worker's own lock (a process-shared semaphore, made
per worker process), so the agent knows at once, without asking the worker, which tasks
have not started and cannot start any more.
"""

from __future__ import annotations

import _multiprocessing
import logging
import os
import secrets
import signal
import struct
import sys
from collections import OrderedDict, deque
from typing import Any

import zmq

from shoal.agent.failures import text_info
from shoal.transport import protocol as P

log = logging.getLogger("shoal.agent")

# Per worker in running_slots: int64 task id, float64 monotonic start, then one byte the
# agent sets to ask the worker to give back its queue (the drain); then, under the worker's
# lock, int64 STARTED, STOP_AT and CANCEL_KEY (see the module docstring).
SLOT_BYTES = 48
GIVE_BACK = 16
STARTED = 24
STOP_AT = 32
CANCEL_KEY = 40
NO_STOP = (1 << 63) - 1


def spec_attempt(spec: list[Any]) -> int | None:
    return spec[P.T_ATTEMPT] if len(spec) > P.T_ATTEMPT else None


def spec_owner(spec: list[Any]) -> int | None:
    return spec[P.T_OWNER] if len(spec) > P.T_OWNER else None


class WorkerHandle:
    __slots__ = ("index", "ident", "pid", "pidfd", "origin", "incarnation", "credit", "tasks",
                 "blocked", "sent_fids", "ready", "said_hello", "est", "queued_s", "owner",
                 "doomed", "timed", "started", "gpu_ids", "lock", "nsent", "cancel_key")

    def __init__(self, index: int, ident: bytes, pid: int, incarnation: int) -> None:
        self.index = index
        self.ident = ident
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.incarnation = incarnation  # its origin is the head's base plus this
        self.origin = 0
        self.credit = 0
        self.tasks: OrderedDict[int, list[Any]] = OrderedDict()  # in the order sent
        self.blocked: set[int] = set()
        self.sent_fids: set[int] = set()
        self.ready = False
        self.said_hello = False
        self.est: dict[int, float] = {}   # tid -> estimated run time when sent
        self.queued_s = 0.0
        self.owner: int | None = None     # the client whose tasks it runs (None: fresh)
        self.doomed = False               # killed by the agent: nothing it says counts
        self.timed: dict[int, float] = {}    # tid -> time limit, for tasks that have one
        self.started: dict[int, float] = {}  # timed tid -> when it started (seen running)
        self.gpu_ids: tuple[str, ...] | None = None  # devices its environment names (None:
        # never set; CUDA reads them once, so a worker keeps the devices it was first given)
        self.lock: Any = None             # shared with the process: see the module docstring
        self.nsent = 0                    # tasks sent to it (the T_SEQ of the last one)
        self.cancel_key = 0               # CANCELs of queued tasks sent to it

    @property
    def busy(self) -> bool:
        return len(self.tasks) > len(self.blocked)


class WorkerPool:
    """Mixin: the worker processes of ``Agent`` (see the module docstring)."""

    def _spawn_worker(self, index: int) -> WorkerHandle:
        self.incarnations += 1
        ident = f"w{index}.{self.incarnations}".encode()
        sys.stdout.flush()
        sys.stderr.flush()
        os.environ["SHOAL_AGENT_PID"] = str(os.getpid())  # the worker checks it still has us
        struct.pack_into("qdqqqq", self.running_slots, SLOT_BYTES * index, 0, 0.0, 0, 0,
                         NO_STOP, 0)
        # one lock per worker process: one killed while it held it takes it along
        lock = _multiprocessing.SemLock(1, 1, 1, f"/shoal-{os.getpid()}-{secrets.token_hex(6)}",
                                        True)
        pid = os.fork()
        if pid == 0:  # child: becomes a warm worker, never returns
            try:
                from shoal.agent.worker import worker_main

                worker_main(self.worker_endpoint, self.worker_key, ident, self.sys_path,
                            self.running_slots, SLOT_BYTES * index, lock)
            finally:
                os._exit(1)
        w = WorkerHandle(index, ident, pid, self.incarnations)
        w.lock = lock
        self.workers[ident] = w
        self.by_pidfd[w.pidfd] = w
        self.poller.register(w.pidfd, zmq.POLLIN)
        return w

    def _welcome_worker(self, w: WorkerHandle) -> None:
        # Called once both the head (origin base) and the worker (HELLO) are there, and
        # again after a new WELCOME (a new origin range: sub-task ids must stay unique).
        if not self.welcomed or not w.said_hello or w.doomed:
            return
        if w.ready and w.origin == self.origin_base + w.incarnation:
            return
        self.by_origin.pop(w.origin, None)
        w.ready = True
        w.origin = self.origin_base + w.incarnation
        self.by_origin[w.origin] = w
        self._send_worker(w, [P.WELCOME, {"origin": w.origin, "prefetch": self.prefetch,
                                          "trace": self.trace,
                                          "slots": max(self.run_slots, self.slots)}])

    def _start_workers(self, n: int) -> None:
        have = {w.index for w in self.workers.values()}
        for index in range(self.slots):
            if n <= 0:
                break
            if index not in have:
                self._spawn_worker(index)
                n -= 1

    def _running_in(self, w: WorkerHandle) -> int:
        """The agent task worker ``w`` runs at this moment (0: none)."""
        return struct.unpack_from("q", self.running_slots, SLOT_BYTES * w.index)[0]

    def _kill_worker(self, w: WorkerHandle) -> tuple[list[list[Any]], list[list[Any]]]:
        """SIGKILL a worker the agent gives up on; it forgets every task the worker held.

        Returns (specs of the tasks it had started: running or waiting on sub-tasks, specs
        of those it held but had not started). A fresh worker replaces it once it is dead.
        """
        running = self._running_in(w)
        started, unstarted = [], []
        for t, spec in w.tasks.items():
            (started if t in w.blocked or t == running or t in w.started else unstarted
             ).append(spec)
        w.doomed = True
        w.ready = False
        w.tasks.clear()
        w.blocked.clear()
        w.est.clear()
        w.timed.clear()
        w.started.clear()
        w.queued_s = 0.0
        self._child_results.pop(w.ident, None)
        self.out_workers.pop(w.ident, None)
        try:
            os.kill(w.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return started, unstarted

    def _worker_died(self, w: WorkerHandle) -> None:
        try:
            _, status = os.waitpid(w.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = None
        self.poller.unregister(w.pidfd)
        os.close(w.pidfd)
        del self.by_pidfd[w.pidfd]
        self.workers.pop(w.ident, None)
        if self.by_origin.get(w.origin) is w:
            del self.by_origin[w.origin]
        self._worker_gone(w)
        if not self.running:
            return
        if w.doomed:  # the agent killed it and already settled its tasks
            if not self.draining:
                self._spawn_worker(w.index)
            return
        if code is None:
            how = "died"
        elif code < 0:
            try:
                signame = signal.Signals(-code).name
            except ValueError:
                signame = str(-code)
            how = f"was killed by signal {-code} ({signame})"
            if code == -signal.SIGKILL and self.oom.struck():
                how += "; the out-of-memory killer killed it (its cgroup's oom_kill count rose)"
        else:
            how = f"exited with status {code}"
        why = f"worker {w.index} (pid {w.pid}) on {self.name} {how} while running this task"
        # Lost: the task it was running (from the shared slot) and the ones it had parked
        # waiting on sub-tasks. Everything else it held had not started or had finished
        # with its result still in flight: those run again.
        running = self._running_in(w)
        struct.pack_into("q", self.running_slots, SLOT_BYTES * w.index, 0)
        for tid, spec in w.tasks.items():
            if tid in w.blocked or tid == running or tid in w.started:
                self._result_to_head([tid, P.LOST, why.encode(), spec_attempt(spec),
                                      text_info(why)], spec)
        self._requeue_front([spec for t, spec in w.tasks.items()
                             if t not in w.blocked and t != running and t not in w.started])
        log.warning("%s", why)
        if not self.draining:
            self._spawn_worker(w.index)

    def _requeue_front(self, specs: list[list[Any]]) -> None:
        """Put tasks a worker held but had not started back at the front, in order."""
        if self.draining:  # leaving: they go back to the head instead
            self.out_return.extend(s[0] for s in specs)
            return
        for spec in reversed(specs):
            opts = spec[P.T_OPTS] if len(spec) > P.T_OPTS else None
            if opts and opts.get("gpus"):
                self.gpu_py.appendleft(spec)
                continue
            hint = spec[P.T_HINT]
            (self.pinned.setdefault(hint % self.slots, deque()) if hint >= 0 else self.py_queue
             ).appendleft(spec)
