"""The node agent: one per node. Slots, warm Python workers, command launcher.

One thread, one poll loop over: the DEALER to the head, the ROUTER to its workers,
each worker's pidfd (death), the spawn helper's socket (commands: shoal.agent.spawner), and
a pipe that signals wake it through. Everything that goes out is batched per turn of the loop.

Credit: the agent tells the head how many cores' worth of tasks it can take (its slots x
(1 + prefetch) at first; then what finishes, and what blocks waiting on sub-tasks). Workers
pull from the agent the same way, so prefetched tasks sit next to the core that runs them.

Failures (protocol.py, docs/failures.md): every result carries the attempt of the spec it
ran. The agent sends HEARTBEAT when it sent nothing else for heartbeat_s and gives up on a
head silent for timeout_s (exit status 3, or with ``reconnect`` waits for a new head on the
same connection file). EVICTED (the head declared it lost) drops everything it holds.

The class is cut in mixins over the same state: ``placing`` (tasks with resources: bound
cores, GPU devices, MPI ranks; --idle-timeout), ``pool`` (the worker processes),
``headlink`` (connection, loss, reconnect, eviction), ``stopping`` (time limits, cancels of
running tasks, the drain, recycling workers between clients), ``commands`` (command tasks:
launch, reap, report); this module holds the loop, the messages and placing Python work.
"""

from __future__ import annotations

import logging
import math
import mmap
import os
import secrets
import shutil
import signal
import socket
import tempfile
import time
from collections import deque
from typing import Any

import zmq

from shoal._sys import alive, set_parent_death_signal
from shoal.agent import resources
from shoal.agent.commands import Commands
from shoal.agent.failures import OomWatch
from shoal.agent.headlink import (
    EXIT_OK,
    HEAD_TIMEOUT_S,
    HEARTBEAT_S,
    HeadLink,
)
from shoal.agent.placing import Placing
from shoal.agent.pool import SLOT_BYTES, WorkerHandle, WorkerPool, spec_owner
from shoal.agent.spawner import wait_child
from shoal.agent.stopping import Stopping
from shoal.transport import protocol as P
from shoal.transport.session import PeerSession

log = logging.getLogger("shoal.agent")

# A turn of the loop that took this much longer than its poll asked for means this process
# was frozen (SIGSTOP, a paused VM): the head's silence meanwhile proves nothing.
FREEZE_SLACK_S = 1.0
# Adaptive prefetch from per-function run-time statistics: a worker is sent tasks until
# about QUEUE_TARGET_S of estimated work waits for it (a function not seen yet counts as
# that long by itself), so tiny tasks travel in big batches and long ones stay balanced.
QUEUE_TARGET_S = 0.005
QUEUE_MAX = 1000
# At most one RESULTS message per this interval (Nagle-like): a result after a quiet spell
# goes at once, results in a stream wait for company. Short commands finish one by one,
# and a message per result would cost the head and the client more than the commands.
RESULTS_DELAY_S = 0.002
RESULTS_BATCH = 256
HELLO_AGAIN_S = 5.0      # while waiting for a restarted head, say HELLO again this often
T_OPTS, T_ATTEMPT, T_OWNER = P.T_OPTS, P.T_ATTEMPT, P.T_OWNER
OWNER_SCAN = 256  # queued tasks a worker bound to one client looks through for its own


class Agent(Commands, Placing, WorkerPool, HeadLink, Stopping):
    def __init__(
        self,
        address: str,
        key: bytes,
        slots: int | None = None,
        workers: int | None = None,
        name: str | None = None,
        owner_pid: int | None = None,
        sys_path: list[str] | None = None,
        *,
        connection_file: str | None = None,
        reconnect: float = 0.0,
        kill_grace: float = 3.0,
        drain_timeout: float = 60.0,
        walltime: float | None = None,
        server_key: str | None = None,
        gpus: str | None = None,
        memory: int | None = None,
        mpi_launcher: str = "mpirun",
        idle_timeout: float | None = None,
    ) -> None:
        self.address = address
        self.key = key
        # The head hop: a session per HELLO (nonces, sequence numbers; see
        # transport.session), CURVE when the run has a server key. The worker hop keeps the
        # plain run-secret codec: an ipc socket in this agent's private 0700 directory.
        self.codec = PeerSession(key)
        self.server_key = server_key
        # the workers' channel keeps the key they were forked with, whatever the head's
        self.worker_key = key
        self.wcodec = P.Codec(key)
        # Cores, GPUs, memory and node name (shoal.agent.resources): the flags, else the
        # allocation's share of this node, else the machine. ValueError: a bad flag.
        self.capacity = resources.capacity(slots, gpus, memory)
        self.slots = self.capacity.slots
        self.placer = resources.Placer(self.slots, self.capacity.gpus)
        if mpi_launcher not in resources.MPI_LAUNCHERS:
            raise ValueError(f"--mpi-launcher {mpi_launcher!r}: expected one of "
                             f"{', '.join(resources.MPI_LAUNCHERS)}")
        self.mpi_launcher = mpi_launcher
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"--idle-timeout {idle_timeout:g}: must be more than 0 seconds")
        self.idle_timeout = idle_timeout
        self.idle_since = time.monotonic()
        self.gpu_py: deque[list[Any]] = deque()  # Python tasks with GPUs, not given out yet
        self.py_gpu_held: dict[int, tuple[WorkerHandle, list[str]]] = {}  # tid -> worker, ids
        self.nworkers = self.slots if workers is None else min(workers, self.slots)
        host = socket.gethostname()
        self.name = name or f"agent-{host}-{os.getpid()}-{secrets.token_hex(2)}"
        self.owner_pid = owner_pid
        self.sys_path = sys_path
        self.connection_file = connection_file
        self.reconnect = reconnect
        self.kill_grace = kill_grace
        self.drain_timeout = drain_timeout
        self.walltime = walltime
        self.prefetch = 1
        self.origin_base = 0
        self.incarnations = 0
        self.heartbeat_s = HEARTBEAT_S
        self.timeout_s = HEAD_TIMEOUT_S
        self.exit_code = EXIT_OK
        self.workers: dict[bytes, WorkerHandle] = {}
        self.by_pidfd: dict[int, WorkerHandle] = {}
        self.by_origin: dict[int, WorkerHandle] = {}
        self.py_queue: deque[list[Any]] = deque()
        self.pinned: dict[int, deque[list[Any]]] = {}
        self._init_commands(QUEUE_TARGET_S)
        self.func_blobs: dict[int, bytes] = {}
        self.consts: list[int] = []  # shoal.shared constants (negative ids): to every worker once
        self.mean: dict[int, float] = {}     # per function (and kind): EWMA of run time
        self.recent_mean = QUEUE_TARGET_S    # of the last batch of results
        self.window_to_send = 0   # window to send to the head at the next flush (0: none)
        self.sent_window = -1
        self.out_results: list[list[Any]] = []
        self.results_sent = 0.0
        # trace (the head said so in WELCOME): results carry this agent's times, as
        # columns in step with out_results (shoal.trace.columns.AgentTimes)
        self.trace = False
        self.run_slots = 0      # slots of the run as the head welcomed this agent
        self.trace_times: Any = None  # AgentTimes once traced (times: time.monotonic())
        self.out_submit: list[list[Any]] = []
        self.out_funcs: dict[int, bytes] = {}
        self.out_workers: dict[bytes, list[list[Any]]] = {}
        self._child_results: dict[bytes, list[list[Any]]] = {}
        self.running = True
        self.head_gone = False
        self.welcomed = False
        self.base_env = dict(os.environ)
        # Per worker index, shared with the (forked) workers: the task it runs now and
        # since when, so a worker's death is charged to the task that was running, exactly,
        # and a time limit holds whatever the task does (even stuck in C code).
        self.running_slots = mmap.mmap(-1, SLOT_BYTES * self.slots)
        self.tmpdir = tempfile.mkdtemp(prefix="shoal-agent-")
        self.worker_endpoint = f"ipc://{self.tmpdir}/workers"
        self.ctx: zmq.Context | None = None
        self.head: zmq.Socket | None = None
        self.poller = zmq.Poller()
        self.oom = OomWatch()
        self.sent_at = time.monotonic()
        self.head_seen = time.monotonic()
        self.reconnect_until: float | None = None
        self.connects = 0
        self._init_stopping()

    # ---- messages from the head -------------------------------------------------------
    def _from_head(self, msg: list[Any]) -> None:
        kind = msg[0]
        if kind == P.TASKS:
            if not self.welcomed:
                log.warning("dropped %d tasks sent before this agent was welcomed", len(msg[1]))
                return
            if msg[2]:
                self._share_consts(msg[2])
                self.func_blobs.update(msg[2])
            if self.draining:  # in flight when DRAIN left: straight back
                self.out_return.extend(spec[P.T_ID] for spec in msg[1])
                return
            need_workers = False
            for spec in msg[1]:
                if spec[P.T_KIND] == P.CMD:
                    self.cmd_queue.append(spec)
                elif len(spec) > T_OPTS and spec[T_OPTS] and spec[T_OPTS].get("gpus"):
                    need_workers = True
                    self.gpu_py.append(spec)  # waits for an idle worker and free devices
                else:
                    need_workers = True
                    hint = spec[P.T_HINT]
                    if hint >= 0:
                        self.pinned.setdefault(hint % self.slots, deque()).append(spec)
                    else:
                        self.py_queue.append(spec)
            if need_workers and not self.workers:
                self._start_workers(min(self.slots, os.cpu_count() or 1))
        elif kind == P.RESULTS:
            for item in msg[1]:
                w = self.by_origin.get(item[0] >> 32)
                if w is not None and not w.doomed:
                    self._child_results.setdefault(w.ident, []).append(item)
        elif kind == P.WELCOME:
            self._welcomed(msg[1])
        elif kind == P.CANCEL:
            # [CANCEL, req, tids, queued_only]: req 0 = the owner is gone (say nothing);
            # queued_only (optional) leaves running tasks alone (shutdown(cancel_futures))
            stopped = self._stop_tasks(set(msg[2]), running=not (len(msg) > 3 and msg[3]))
            if msg[1]:  # a client's cancel: say which were dropped or stopped here
                self._send_head([P.CANCEL, msg[1], stopped])
        elif kind == P.STATE:  # [STATE, key, tids]: which have started (Future.running())
            self._send_head([P.STATE, msg[1], self._started(set(msg[2]))])
        elif kind == P.EVICTED:
            if self.welcomed:
                self._evicted(str(msg[1]) if len(msg) > 1 else "declared lost")
        elif kind == P.SHUTDOWN:
            self.running = False
            self.head_gone = True
        elif kind == P.HEARTBEAT:
            pass

    # ---- messages from workers ----------------------------------------------------------
    def _from_worker(self, ident: bytes, msg: list[Any]) -> None:
        w = self.workers.get(ident)
        if w is None or w.doomed:
            return
        kind = msg[0]
        if kind == P.HELLO:
            w.said_hello = True
            self._welcome_worker(w)
        elif kind == P.RESULTS:
            tasks, est, out = w.tasks, w.est, self.out_results
            first = len(out)
            for item in msg[1]:
                spec = tasks.pop(item[0], None)
                if spec is None:  # stopped or handed back meanwhile: not ours to send
                    continue
                w.queued_s -= est.pop(item[0], 0.0)
                if w.timed:
                    w.timed.pop(item[0], None)
                    w.started.pop(item[0], None)
                item[3] = spec[T_ATTEMPT] if len(spec) > T_ATTEMPT else None  # R_ATTEMPT
                out.append(item)
            if self.trace:  # the worker sent launched, started, ended as bytes (msg[3])
                self.trace_times.worker_results(msg[1], out[first:], msg[3] if len(msg) > 3
                                                else None, w.index, self.py_gpu_held)
            if not tasks:
                w.queued_s = 0.0
            if len(msg) > 2 and msg[2]:
                mean = self.mean
                n = total = 0.0
                for key, (runs, secs) in msg[2].items():
                    m = secs / runs
                    old = mean.get(key)
                    mean[key] = m if old is None else 0.7 * old + 0.3 * m
                    n += runs
                    total += secs
                self.recent_mean = total / n
        elif kind == P.CREDIT:
            w.credit = msg[1]   # absolute window of unfinished, unblocked tasks
            for ev in msg[2]:  # in order: a task may block, resume and block again
                if ev > 0:
                    if ev in w.tasks:
                        w.blocked.add(ev)
                        if ev in w.timed and ev not in w.started:
                            w.started[ev] = time.monotonic()  # began before we looked
                else:
                    w.blocked.discard(-ev)
        elif kind == P.SUBMIT:
            owner = w.owner
            for spec in msg[1]:  # a tree keeps its client
                if len(spec) < P.TASK_LEN:
                    spec.extend([None] * (P.TASK_LEN - len(spec)))
                spec[P.T_OWNER] = owner
            self.out_submit.extend(msg[1])
            if msg[2]:
                self.out_funcs.update(msg[2])
                self._share_consts(msg[2], w)
        elif kind == P.RETURN:
            self._worker_returned(w, msg[1])

    def _share_consts(self, blobs: dict[int, bytes], source: WorkerHandle | None = None) -> None:
        """shoal.shared constants (negative ids) go to every worker once, at the next flush,
        with tasks or alone (a task may be waiting for one); ``source`` has it already."""
        new = [k for k in blobs if k < 0 and k not in self.func_blobs]
        if not new:
            return
        for k in new:
            self.func_blobs[k] = blobs[k]
            self.consts.append(k)
            if source is not None:
                source.sent_fids.add(k)
        for w in self.workers.values():
            if w.ready and not w.doomed:
                self.out_workers.setdefault(w.ident, [])

    def _result_to_head(self, item: list[Any], spec: list[Any] | None = None) -> None:
        """A result the agent makes (a command's, a failure); ``spec``: the Python task's,
        when the agent gave it to a worker (traced: its launched time is there)."""
        if self.trace:  # its times (a 6th field) go to the columns; without: what is known
            self.trace_times.add(item.pop() if len(item) > 5 else [
                spec[P.T_LAUNCH] if spec is not None and len(spec) > P.T_LAUNCH else None,
                None, time.monotonic(), None, None, None])
        self.out_results.append(item)  # the window (sent separately) accounts for its cores

    def _want_credit(self) -> None:
        """Tell the head the window of unfinished tasks this agent wants (cores' worth).

        What the workers want (they want more when their tasks are short, and their
        blocked tasks stay unfinished) plus slots x (1 + prefetch) for commands and the
        local queue. Sent only when it changes.
        """
        window = self.slots * (1 + self.prefetch)
        short = self.recent_mean < QUEUE_TARGET_S
        extra = min(QUEUE_MAX, int(QUEUE_TARGET_S / max(self.recent_mean, 1e-6))) if short else 0
        for w in self.workers.values():
            if w.ready:
                window += len(w.blocked) + extra
        window += self._command_window()  # short commands: a deeper window (commands.py)
        if window != self.sent_window:
            self.sent_window = window
            self.window_to_send = window

    # ---- placing work ---------------------------------------------------------------------
    def _free_cores(self) -> int:
        busy_workers = sum(1 for w in self.workers.values() if w.busy)
        return self.slots - self.cmd_cores - busy_workers

    @staticmethod
    def _wants(w: WorkerHandle) -> bool:
        unfinished = len(w.tasks) - len(w.blocked)
        # One task at a time, unless the worker's queue holds less than QUEUE_TARGET_S of
        # known-short work: a task queued behind a long one in a worker could not move to a
        # worker that falls idle, so the prefetch of long or unknown tasks stays here.
        if not w.credit:
            return False  # not ready for tasks yet
        return unfinished < 1 or (w.queued_s < QUEUE_TARGET_S and unfinished < QUEUE_MAX)

    def _give(self, w: WorkerHandle, spec: list[Any]) -> None:
        e = self.mean.get(spec[2] if spec[1] == P.PY else -spec[2], QUEUE_TARGET_S)
        w.est[spec[0]] = e
        w.queued_s += e
        w.tasks[spec[0]] = spec
        if len(spec) > T_OWNER:
            owner = spec[T_OWNER]
            if owner is not None:
                w.owner = owner
            if spec[T_OPTS]:
                limit = self._time_limit(spec)
                if limit is not None:
                    w.timed[spec[0]] = limit
        out = self.out_workers.get(w.ident)
        if out is None:
            out = self.out_workers[w.ident] = []
        out.append(spec)

    def _take_other(self, w: WorkerHandle) -> list[Any] | None:
        """A queued task (not the first) that ``w``, bound to its client, may run."""
        queue = self.py_queue
        mine = w.owner
        for i in range(1, min(len(queue), OWNER_SCAN)):
            owner = spec_owner(queue[i])
            if owner is None or owner == mine:
                spec = queue[i]
                del queue[i]
                return spec
        return None

    def _dispatch(self) -> None:
        # Python tasks to workers that want them: pinned blocks (static schedule) to their
        # worker; the shared queue round-robin, one task per worker per pass, idle workers
        # first, so tasks spread over idle workers before any worker gets a second one.
        if self.py_queue or self.pinned:
            free = self._free_cores()
            ready = [w for w in self.workers.values() if w.ready]  # a ROUTER drops to others
            if self.pinned:
                for w in ready:
                    q = self.pinned.get(w.index)
                    while q and self._wants(w):
                        owner = spec_owner(q[0])
                        if owner is not None and w.owner not in (None, owner):
                            if not w.tasks:
                                self._recycle(w)  # bound to another client, idle
                            break
                        self._give(w, q.popleft())
                for k in [k for k, q in self.pinned.items() if not q]:
                    del self.pinned[k]
            cands = sorted((w for w in ready if self._wants(w)),
                           key=lambda w: len(w.tasks) - len(w.blocked))
            queue = self.py_queue
            while queue and cands:
                nxt = []
                for w in cands:
                    if not queue:
                        break
                    idle = not w.busy
                    if idle and free <= 0:
                        continue
                    spec = queue[0]
                    mine = w.owner
                    if mine is None or len(spec) <= T_OWNER or spec[T_OWNER] in (None, mine):
                        queue.popleft()
                    else:  # bound to another client than the first task's
                        spec = self._take_other(w)
                        if spec is None:
                            continue
                    if idle:
                        free -= 1
                    self._give(w, spec)
                    if self._wants(w):
                        nxt.append(w)
                cands = nxt
            if queue and free > 0:
                # Tasks wait, cores are free, and the idle workers are bound to other
                # clients: fresh forks replace them (a client never sees another's globals).
                for w in ready:
                    if free <= 0:
                        break
                    if not w.tasks and w.owner is not None and w.credit:
                        self._recycle(w)
                        free -= 1
        if self.gpu_py or self.py_gpu_held:
            self._dispatch_gpu_python()
        if self.cmd_queue or self.commands:  # (commands at the helper: keep its cap current)
            self._dispatch_commands()

    # ---- sending -------------------------------------------------------------------------
    def _send_head(self, msg: list[Any]) -> None:
        self.head.send_multipart(self.codec.encode(msg), copy=False)
        self.sent_at = time.monotonic()

    def _send_worker(self, w: WorkerHandle, msg: list[Any]) -> None:
        self.wsock.send_multipart([w.ident, *self.wcodec.encode(msg)], copy=False)

    def _flush(self) -> None:
        if self._child_results:
            for ident, items in self._child_results.items():
                w = self.workers.get(ident)
                if w is not None and items:
                    self._send_worker(w, [P.RESULTS, items])
            self._child_results = {}
        if self.out_workers:
            for ident, specs in self.out_workers.items():
                w = self.workers.get(ident)
                if w is None:
                    continue
                funcs = {}
                n = w.nsent
                for spec in specs:
                    n += 1  # its place in this worker's stream (T_SEQ): for cancels
                    if len(spec) > P.T_SEQ:
                        spec[P.T_SEQ] = n
                    else:
                        spec.extend([None] * (P.T_SEQ - len(spec)))
                        spec.append(n)
                    fid = spec[2]
                    if fid not in w.sent_fids:
                        w.sent_fids.add(fid)
                        blob = self.func_blobs.get(fid)
                        if blob is not None:
                            funcs[fid] = blob
                if self.trace:  # launched: the worker sends it back with its times
                    now = time.monotonic()
                    for spec in specs:
                        if len(spec) > P.T_LAUNCH:
                            spec[P.T_LAUNCH] = now
                        else:
                            spec.append(now)
                for c in self.consts:  # shoal.shared constants travel once per worker
                    if c not in w.sent_fids:
                        w.sent_fids.add(c)
                        funcs[c] = self.func_blobs[c]
                w.nsent = n
                if specs or funcs:
                    self._send_worker(w, [P.TASKS, specs, funcs])
            self.out_workers = {}
        self._flush_commands()
        if not self.welcomed:
            return
        if self.out_results and (
            len(self.out_results) >= RESULTS_BATCH
            or time.monotonic() - self.results_sent >= RESULTS_DELAY_S
            or not self.running or self.draining
        ):
            res, self.out_results = self.out_results, []
            if self.trace:  # trace: the times go packed, one blob per message
                self._send_head([P.RESULTS, res, self.trace_times.take(len(res))])
            else:
                self._send_head([P.RESULTS, res])
            self.results_sent = self.sent_at
        if self.out_submit:
            subs, self.out_submit = self.out_submit, []
            funcs, self.out_funcs = self.out_funcs, {}
            self.func_blobs.update(funcs)
            self._send_head([P.SUBMIT, subs, funcs, 0])
        if self.out_return:
            tids, self.out_return = self.out_return, []
            self._send_head([P.RETURN, tids])
        if self.window_to_send > 0:
            n, self.window_to_send = self.window_to_send, 0
            if not self.draining:
                self._send_head([P.CREDIT, n])

    # ---- loop ------------------------------------------------------------------------------
    def dump_state(self, *_: object) -> None:
        """SIGUSR1: log what this agent holds (for diagnosing a stuck run)."""
        log.warning(
            "state: py_queue=%d gpu_py=%d cmd_queue=%d running_cmds=%s cmd_cores=%d free=%d "
            "free_gpus=%s workers=%s",
            len(self.py_queue), len(self.gpu_py), len(self.cmd_queue),
            [(r.tid, r.pid, r.status) for r in self.commands.values()],
            self.cmd_cores, self._free_cores(), self.placer.free_gpus,
            [(w.index, len(w.tasks), len(w.blocked), w.credit, w.owner)
             for w in self.workers.values()],
        )

    def _wait_s(self, now: float) -> float:
        """How long the next poll may sleep: until the next thing due."""
        due = (now + 1.0 if self.owner_pid is not None or self.commands
               or self.idle_timeout is not None else math.inf)
        if self.welcomed:
            due = min(due, self.sent_at + self.heartbeat_s)
        if self.reconnect_until is not None:  # re-read the connection file every second
            due = min(due, now + 1.0, self.reconnect_until + 0.01)
        else:
            due = min(due, self.head_seen + self.timeout_s + 0.01)
        if self.out_results:  # wake up to send them
            due = min(due, self.results_sent + RESULTS_DELAY_S)
        due = min(due, self._limits_due(now))
        return max(0.0, due - now)

    def run(self) -> None:
        set_parent_death_signal()
        signal.signal(signal.SIGUSR1, self.dump_state)
        log.info("%s", resources.describe(self.capacity, self.placer))
        cmd_fds = self._start_spawners()  # first: the fewest descriptors for them to carry
        # Fork the warm workers before this process has any ZeroMQ context or thread, after
        # importing what they run: imported once here, every worker starts with it for free.
        if self.nworkers:
            import shoal.agent.worker  # noqa: F401
            from shoal.task import codec

            codec.preload()  # cloudpickle, which the codec imports at its first use
        self._start_workers(self.nworkers)
        self.ctx = zmq.Context()
        self.wsock = self.ctx.socket(zmq.ROUTER)
        self.wsock.setsockopt(zmq.SNDHWM, 0)
        self.wsock.setsockopt(zmq.RCVHWM, 0)
        self.wsock.setsockopt(zmq.LINGER, 0)
        self.wsock.bind(self.worker_endpoint)
        self._connect_head()
        self._hello()
        poller = self.poller
        poller.register(self.wsock, zmq.POLLIN)
        for fd in cmd_fds:
            poller.register(fd, zmq.POLLIN)
        by_cmd_fd = self.by_cmd_fd
        wake_fd = self._watch_signals()
        second = time.monotonic()
        try:
            while self.running:
                before = time.monotonic()
                wait = self._wait_s(before)
                # whole milliseconds, rounded up: pyzmq truncates, and a 0.7 ms wait for the
                # results timer made this loop spin (12 turns a command in W2)
                events = poller.poll(math.ceil(wait * 1000))
                now = polled = time.monotonic()
                if now - before > wait + FREEZE_SLACK_S:
                    # frozen (SIGSTOP, a paused VM): the head gets a fresh timeout
                    log.info("this agent was frozen for %.0f s", now - before - wait)
                    self.head_seen = now
                for sock_or_fd, _ in events:
                    if sock_or_fd is self.head:
                        self.head_seen = now
                        self._drain(self.head, from_head=True)
                    elif sock_or_fd is self.wsock:
                        self._drain(self.wsock, from_head=False)
                    elif sock_or_fd in by_cmd_fd:
                        self._command_events(by_cmd_fd[sock_or_fd])
                    elif sock_or_fd == wake_fd:
                        self._signalled(now)
                    elif sock_or_fd in self.by_pidfd:
                        self._worker_died(self.by_pidfd[sock_or_fd])
                if not self.running:
                    break
                self._check_limits(now)
                if self.draining:
                    self._drain_step(now)
                else:
                    self._dispatch()
                    if self.welcomed:
                        self._want_credit()
                self._flush()
                if self.finished:
                    break
                now = time.monotonic()
                if now >= second + 1.0:  # about once a second
                    second = now
                    self._command_chores(now)
                    if self.idle_timeout is not None and not self.draining:
                        self._idle_check(now)
                    if self.owner_pid is not None and not alive(self.owner_pid):
                        log.info("owner process is gone; stopping")
                        break
                if self.reconnect_until is not None:
                    self._watch_connection_file(now)
                    if not self.welcomed and now - self.head_seen >= HELLO_AGAIN_S:
                        self._hello()  # a fresh one: a HELLO queued too long is refused
                    if now > self.reconnect_until:
                        self._head_lost(now)
                elif now - self.head_seen > self.timeout_s:
                    if now - polled > FREEZE_SLACK_S or self.head.poll(0):
                        self.head_seen = now  # frozen in this turn, or the head spoke since
                    else:
                        self._head_lost(now)
                elif self.welcomed and now - self.sent_at >= self.heartbeat_s:
                    self._send_head([P.HEARTBEAT])
        finally:
            self._shutdown()

    def _drain(self, sock: zmq.Socket, from_head: bool) -> None:
        recv = sock.recv_multipart
        for _ in range(10000):
            try:
                frames = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if from_head:
                if len(frames) != 2:
                    continue
                ident, (sig, body) = None, frames
            else:
                if len(frames) != 3:
                    continue
                ident, sig, body = frames
            try:
                msg = (self.codec if from_head else self.wcodec).decode(sig, body)
            except P.AuthError:
                log.warning("dropped a message that failed authentication")
                continue
            if from_head:
                self._from_head(msg)
                if sock is not self.head:  # reconnected while handling it
                    return
            else:
                self._from_worker(ident, msg)

    def _shutdown(self) -> None:
        self.running = False
        self._kill_commands()
        for w in list(self.workers.values()):
            if w.tasks:  # may be stuck anywhere: no waiting for it
                try:
                    os.kill(w.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                continue
            try:
                self._send_worker(w, [P.SHUTDOWN])
            except Exception:  # noqa: BLE001
                pass
        deadline = time.monotonic() + 2.0
        for w in list(self.workers.values()):
            # one that has not said hello may not be connected yet and never hear us
            if not (w.said_hello and not w.tasks
                    and wait_child(w.pid, max(0.0, deadline - time.monotonic()))):
                try:
                    os.kill(w.pid, signal.SIGKILL)
                    os.waitpid(w.pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
        self._reap_commands()
        if self.ctx is not None:
            if not self.head_gone and self.head is not None:
                try:
                    self._send_head([P.BYE, self.bye_reason])
                except Exception:  # noqa: BLE001
                    pass
            if self.head is not None:
                self.head.close(linger=0 if self.head_gone else 2000)
            self.wsock.close(linger=0)
            self.ctx.term()
        self._unwatch_signals()
        try:
            os.unlink(f"{self.tmpdir}/workers")
        except FileNotFoundError:
            pass
        shutil.rmtree(self.tmpdir, ignore_errors=True)  # the workers' socket
