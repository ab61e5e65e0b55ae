"""The node agent: one per node. Slots, warm Python workers, command launcher.

One thread, one poll loop over: the DEALER to the head, the ROUTER to its workers,
each worker's pidfd (death), each command's pidfd and output pipes. Everything that goes
out is batched per turn of the loop.

Credit: the agent tells the head how many cores' worth of tasks it can take (its slots x
(1 + prefetch) at first; then what finishes, and what blocks waiting on sub-tasks). Workers
pull from the agent the same way, so prefetched tasks sit next to the core that runs them.
"""

from __future__ import annotations

import logging
import mmap
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from collections import OrderedDict, deque
from typing import Any

import zmq

from shoal._sys import alive, set_parent_death_signal
from shoal.agent import launcher
from shoal.transport import protocol as P

log = logging.getLogger("shoal.agent")

HEARTBEAT_S = 1.0
HEAD_TIMEOUT_S = 60.0
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


class WorkerHandle:
    __slots__ = ("index", "ident", "pid", "pidfd", "origin", "credit", "tasks", "blocked",
                 "sent_fids", "ready", "said_hello", "est", "queued_s")

    def __init__(self, index: int, ident: bytes, pid: int, origin: int) -> None:
        self.index = index
        self.ident = ident
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.origin = origin
        self.credit = 0
        self.tasks: OrderedDict[int, list[Any]] = OrderedDict()  # in the order sent
        self.blocked: set[int] = set()
        self.sent_fids: set[int] = set()
        self.ready = False
        self.said_hello = False
        self.est: dict[int, float] = {}   # tid -> estimated run time when sent
        self.queued_s = 0.0

    @property
    def busy(self) -> bool:
        return len(self.tasks) > len(self.blocked)


class Agent:
    def __init__(
        self,
        address: str,
        key: bytes,
        slots: int | None = None,
        workers: int | None = None,
        name: str | None = None,
        owner_pid: int | None = None,
        sys_path: list[str] | None = None,
    ) -> None:
        self.address = address
        self.key = key
        self.codec = P.Codec(key)
        self.slots = slots or os.cpu_count() or 1
        self.nworkers = self.slots if workers is None else min(workers, self.slots)
        host = socket.gethostname()
        self.name = name or f"agent-{host}-{os.getpid()}-{secrets.token_hex(2)}"
        self.owner_pid = owner_pid
        self.sys_path = sys_path
        self.prefetch = 1
        self.origin_base = 0
        self.incarnations = 0
        self.workers: dict[bytes, WorkerHandle] = {}
        self.by_pidfd: dict[int, WorkerHandle] = {}
        self.by_origin: dict[int, WorkerHandle] = {}
        self.py_queue: deque[list[Any]] = deque()
        self.pinned: dict[int, deque[list[Any]]] = {}
        self.cmd_queue: deque[list[Any]] = deque()
        self.commands: dict[int, launcher.Running] = {}      # pidfd -> running
        # Running commands' pidfds live in one epoll set, itself one fd in the poller: a
        # zmq poll costs O(registered items), and 400 running commands would make every
        # turn of the loop pay for all of them.
        self.cmd_epoll = select.epoll()
        self.cmd_cores = 0
        self.func_blobs: dict[int, bytes] = {}
        self.mean: dict[int, float] = {}     # per function (and kind): EWMA of run time
        self.recent_mean = QUEUE_TARGET_S    # of the last batch of results
        self.cmd_mean = QUEUE_TARGET_S       # EWMA of command run time (launch to exit)
        self.window_to_send = 0   # window to send to the head at the next flush (0: none)
        self.sent_window = -1
        self.out_results: list[list[Any]] = []
        self.results_sent = 0.0
        self.cmd_deep = 0                # extra window for short commands (see _want_credit)
        self.out_submit: list[list[Any]] = []
        self.out_funcs: dict[int, bytes] = {}
        self.out_workers: dict[bytes, list[list[Any]]] = {}
        self.running = True
        self.head_gone = False
        self.welcomed = False
        self.base_env = dict(os.environ)
        # One int64 per worker index, shared with the (forked) workers: the task each runs
        # now, so a worker's death is charged to the task that was running, exactly.
        self.running_slots = mmap.mmap(-1, 8 * self.slots)
        self.tmpdir = tempfile.mkdtemp(prefix="shoal-agent-")
        self.worker_endpoint = f"ipc://{self.tmpdir}/workers"
        self.ctx: zmq.Context | None = None
        self.poller = zmq.Poller()

    # ---- workers --------------------------------------------------------------------
    def _spawn_worker(self, index: int) -> WorkerHandle:
        self.incarnations += 1
        origin = self.incarnations  # offset from the head-given base, fixed at WELCOME
        ident = f"w{index}.{self.incarnations}".encode()
        sys.stdout.flush()
        sys.stderr.flush()
        os.environ["SHOAL_AGENT_PID"] = str(os.getpid())  # the worker checks it still has us
        pid = os.fork()
        if pid == 0:  # child: becomes a warm worker, never returns
            try:
                from shoal.agent.worker import worker_main

                worker_main(self.worker_endpoint, self.key, ident, self.sys_path,
                            self.running_slots, 8 * index)
            finally:
                os._exit(1)
        w = WorkerHandle(index, ident, pid, origin)
        self.workers[ident] = w
        self.by_pidfd[w.pidfd] = w
        self.poller.register(w.pidfd, zmq.POLLIN)
        return w

    def _welcome_worker(self, w: WorkerHandle) -> None:
        # Called once both the head (origin base) and the worker (HELLO) are there.
        if w.ready or not self.welcomed or not getattr(w, "said_hello", False):
            return
        w.ready = True
        w.origin = self.origin_base + w.origin
        self.by_origin[w.origin] = w
        self._send_worker(w, [P.WELCOME, {"origin": w.origin, "prefetch": self.prefetch}])

    def _start_workers(self, n: int) -> None:
        have = {w.index for w in self.workers.values()}
        for index in range(self.slots):
            if n <= 0:
                break
            if index not in have:
                self._spawn_worker(index)
                n -= 1

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
        self.by_origin.pop(w.origin, None)
        if not self.running:
            return
        if code is None:
            how = "died"
        elif code < 0:
            try:
                signame = signal.Signals(-code).name
            except ValueError:
                signame = str(-code)
            how = f"was killed by signal {-code} ({signame})"
        else:
            how = f"exited with status {code}"
        why = f"worker {w.index} (pid {w.pid}) on {self.name} {how} while running this task"
        # Lost: the task it was running (from the shared slot) and the ones it had parked
        # waiting on sub-tasks. Everything else it held had not started or had finished
        # with its result still in flight: those run again.
        running = struct.unpack_from("q", self.running_slots, 8 * w.index)[0]
        struct.pack_into("q", self.running_slots, 8 * w.index, 0)
        lost = [t for t in w.tasks if t in w.blocked or t == running]
        requeue = [spec for t, spec in w.tasks.items() if t not in w.blocked and t != running]
        for tid in lost:
            self._result_to_head([tid, P.LOST, why.encode(), None])
        for spec in reversed(requeue):
            (self.pinned.setdefault(spec[6], deque()) if spec[6] >= 0 else self.py_queue
             ).appendleft(spec)
        log.warning("%s", why)
        self._spawn_worker(w.index)

    # ---- messages from the head -------------------------------------------------------
    def _from_head(self, msg: list[Any]) -> None:
        kind = msg[0]
        if kind == P.TASKS:
            if msg[2]:
                self.func_blobs.update(msg[2])
            need_workers = False
            for spec in msg[1]:
                if spec[1] == P.CMD:
                    self.cmd_queue.append(spec)
                else:
                    need_workers = True
                    hint = spec[6]
                    if hint >= 0:
                        self.pinned.setdefault(hint % self.slots, deque()).append(spec)
                    else:
                        self.py_queue.append(spec)
            if need_workers and not self.workers:
                self._start_workers(min(self.slots, os.cpu_count() or 1))
        elif kind == P.RESULTS:
            for item in msg[1]:
                w = self.by_origin.get(item[0] >> 32)
                if w is not None:
                    self._queue_child_result(w, item)
        elif kind == P.WELCOME:
            info = msg[1]
            self.welcomed = True
            self.prefetch = int(info.get("prefetch", 1))
            self.origin_base = int(info["origin"])
            for w in list(self.workers.values()):
                self._welcome_worker(w)
        elif kind == P.CANCEL:
            if msg[1]:  # a client's cancel: drop what has not started, say which
                self._send_head([P.CANCEL, msg[1], self._drop_queued(set(msg[2]))])
            else:       # the owner is gone: stop them wherever they are
                self._revoke(set(msg[2]))
        elif kind == P.SHUTDOWN:
            self.running = False
            self.head_gone = True
        elif kind == P.HEARTBEAT:
            pass

    def _queue_child_result(self, w: WorkerHandle, item: list[Any]) -> None:
        self._child_results.setdefault(w.ident, []).append(item)

    def _drop_queued(self, tids: set[int]) -> list[int]:
        dropped = [s[0] for s in self.py_queue if s[0] in tids]
        dropped += [s[0] for s in self.cmd_queue if s[0] in tids]
        for q in self.pinned.values():
            dropped += [s[0] for s in q if s[0] in tids]
        if dropped:
            gone = set(dropped)
            self.py_queue = deque(s for s in self.py_queue if s[0] not in gone)
            self.cmd_queue = deque(s for s in self.cmd_queue if s[0] not in gone)
            for q in self.pinned.values():
                kept = [s for s in q if s[0] not in gone]
                q.clear()
                q.extend(kept)
        return dropped

    def _revoke(self, tids: set[int]) -> None:
        self._drop_queued(tids)
        for run in list(self.commands.values()):
            if run.tid in tids:
                launcher.kill(run)
        for w in self.workers.values():
            hit = [t for t in w.tasks if t in tids]
            if hit:
                self._send_worker(w, [P.CANCEL, 0, hit])

    # ---- messages from workers ----------------------------------------------------------
    def _from_worker(self, ident: bytes, msg: list[Any]) -> None:
        w = self.workers.get(ident)
        if w is None:
            return
        kind = msg[0]
        if kind == P.HELLO:
            w.said_hello = True
            self._welcome_worker(w)
        elif kind == P.RESULTS:
            tasks, est = w.tasks, w.est
            for item in msg[1]:
                tasks.pop(item[0], None)
                w.queued_s -= est.pop(item[0], 0.0)
                self.out_results.append(item)
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
                else:
                    w.blocked.discard(-ev)
        elif kind == P.SUBMIT:
            self.out_submit.extend(msg[1])
            if msg[2]:
                self.out_funcs.update(msg[2])

    def _result_to_head(self, item: list[Any]) -> None:
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
        if self.cmd_mean < QUEUE_TARGET_S:  # short commands: queue enough to cover a round trip
            deep = min(QUEUE_MAX, int(self.slots * QUEUE_TARGET_S / max(self.cmd_mean, 1e-5)))
            # the mean moves with every command; the window grows at once but shrinks only
            # when far too big, so it is not re-sent after every command
            if deep > self.cmd_deep or deep < self.cmd_deep // 4:
                self.cmd_deep = deep
            window += self.cmd_deep
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
        out = self.out_workers.get(w.ident)
        if out is None:
            out = self.out_workers[w.ident] = []
        out.append(spec)

    def _dispatch(self) -> None:
        # Python tasks to workers that want them: pinned blocks (static schedule) to their
        # worker; the shared queue round-robin, one task per worker per pass, idle workers
        # first, so tasks spread over idle workers before any worker gets a second one.
        if self.py_queue or self.pinned:
            free = self._free_cores()
            ready = [w for w in self.workers.values() if w.ready]  # a ROUTER drops to others
            for w in ready:
                q = self.pinned.get(w.index)
                while q and self._wants(w):
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
                    if not w.busy:
                        if free <= 0:
                            continue
                        free -= 1
                    self._give(w, queue.popleft())
                    if self._wants(w):
                        nxt.append(w)
                cands = nxt
        # Commands when cores are free, in order (free cores counted once per pass).
        free = self._free_cores() if self.cmd_queue else 0
        while self.cmd_queue:
            spec = self.cmd_queue[0]
            cores = spec[5] or 1
            if cores > free:
                break
            self.cmd_queue.popleft()
            try:
                run = launcher.spawn(spec[0], spec[3], cores, self.base_env)
            except launcher.LaunchError as exc:
                self._result_to_head([spec[0], P.ERR, str(exc).encode(), None])
                continue
            free -= cores
            self.cmd_cores += cores
            self.commands[run.pidfd] = run
            self.cmd_epoll.register(run.pidfd, select.EPOLLIN)

    def _command_events(self) -> None:
        for fd, _ in self.cmd_epoll.poll(0):
            run = self.commands.get(fd)
            if run is not None and run.status is None and launcher.reap(run):
                self._done(run)

    def _done(self, run: launcher.Running) -> None:
        self.cmd_epoll.unregister(run.pidfd)
        self.commands.pop(run.pidfd, None)
        os.close(run.pidfd)
        self.cmd_cores -= run.cores
        dt = time.monotonic() - run.started
        self.cmd_mean = 0.8 * self.cmd_mean + 0.2 * dt
        status, payload = launcher.outcome(run)
        self._result_to_head([run.tid, status, payload, None])

    # ---- sending -------------------------------------------------------------------------
    def _send_head(self, msg: list[Any]) -> None:
        self.head.send_multipart(self.codec.encode(msg), copy=False)

    def _send_worker(self, w: WorkerHandle, msg: list[Any]) -> None:
        self.wsock.send_multipart([w.ident, *self.codec.encode(msg)], copy=False)

    def _flush(self) -> None:
        for ident, items in self._child_results.items():
            w = self.workers.get(ident)
            if w is not None and items:
                self._send_worker(w, [P.RESULTS, items])
        self._child_results = {}
        for ident, specs in self.out_workers.items():
            w = self.workers.get(ident)
            if w is None or not specs:
                continue
            funcs = {}
            for spec in specs:
                fid = spec[2]
                if fid not in w.sent_fids:
                    w.sent_fids.add(fid)
                    blob = self.func_blobs.get(fid)
                    if blob is not None:
                        funcs[fid] = blob
            self._send_worker(w, [P.TASKS, specs, funcs])
        self.out_workers = {}
        if not self.welcomed:
            return
        if self.out_results and (
            len(self.out_results) >= RESULTS_BATCH
            or time.monotonic() - self.results_sent >= RESULTS_DELAY_S
            or not self.running
        ):
            res, self.out_results = self.out_results, []
            self._send_head([P.RESULTS, res])
            self.sent_at = self.results_sent = time.monotonic()
        if self.out_submit:
            subs, self.out_submit = self.out_submit, []
            funcs, self.out_funcs = self.out_funcs, {}
            self.func_blobs.update(funcs)
            self._send_head([P.SUBMIT, subs, funcs, 0])
            self.sent_at = time.monotonic()
        if self.window_to_send > 0:
            n, self.window_to_send = self.window_to_send, 0
            self._send_head([P.CREDIT, n])
            self.sent_at = time.monotonic()

    # ---- loop ------------------------------------------------------------------------------
    def dump_state(self, *_: object) -> None:
        """SIGUSR1: log what this agent holds (for diagnosing a stuck run)."""
        log.warning(
            "state: py_queue=%d cmd_queue=%d running_cmds=%s cmd_cores=%d free=%d workers=%s",
            len(self.py_queue), len(self.cmd_queue),
            [(r.tid, r.pid, r.status) for r in self.commands.values()],
            self.cmd_cores, self._free_cores(),
            [(w.index, len(w.tasks), len(w.blocked), w.credit) for w in self.workers.values()],
        )

    def run(self) -> None:
        set_parent_death_signal()
        signal.signal(signal.SIGUSR1, self.dump_state)
        # Fork the warm workers before this process has any ZeroMQ context or thread, after
        # importing what they run: imported once here, every worker starts with it for free.
        if self.nworkers:
            import shoal.agent.worker  # noqa: F401
        self._start_workers(self.nworkers)
        self.ctx = zmq.Context()
        self.wsock = self.ctx.socket(zmq.ROUTER)
        self.wsock.setsockopt(zmq.SNDHWM, 0)
        self.wsock.setsockopt(zmq.RCVHWM, 0)
        self.wsock.setsockopt(zmq.LINGER, 0)
        self.wsock.bind(self.worker_endpoint)
        self.head = self.ctx.socket(zmq.DEALER)
        self.head.setsockopt(zmq.IDENTITY, self.name.encode())
        self.head.setsockopt(zmq.SNDHWM, 0)
        self.head.setsockopt(zmq.RCVHWM, 0)
        self.head.setsockopt(zmq.LINGER, 2000)
        self.head.setsockopt(zmq.RECONNECT_IVL, 10)  # a head starting beside us: retry soon
        self.head.connect(self.address)
        self._child_results: dict[bytes, list[list[Any]]] = {}
        self.sent_at = time.monotonic()
        self._send_head([P.HELLO, "agent", {"slots": self.slots, "host": socket.gethostname(),
                                              "pid": os.getpid()}])
        # the first credit: every slot plus its prefetch (sent once WELCOME tells the prefetch)
        poller = self.poller
        poller.register(self.head, zmq.POLLIN)
        poller.register(self.wsock, zmq.POLLIN)
        poller.register(self.cmd_epoll.fileno(), zmq.POLLIN)
        epoll_fd = self.cmd_epoll.fileno()
        head_seen = time.monotonic()
        next_beat = time.monotonic() + HEARTBEAT_S
        try:
            while self.running:
                wait_ms = HEARTBEAT_S * 1000
                if self.out_results:  # wake up to send them
                    wait_ms = max(0.0, (self.results_sent + RESULTS_DELAY_S - time.monotonic()) * 1000)
                events = poller.poll(wait_ms)
                for sock_or_fd, _ in events:
                    if sock_or_fd is self.head:
                        head_seen = time.monotonic()
                        self._drain(self.head, from_head=True)
                    elif sock_or_fd is self.wsock:
                        self._drain(self.wsock, from_head=False)
                    elif sock_or_fd == epoll_fd:
                        self._command_events()
                    elif sock_or_fd in self.by_pidfd:
                        self._worker_died(self.by_pidfd[sock_or_fd])
                self._dispatch()
                if self.welcomed:
                    self._want_credit()
                self._flush()
                now = time.monotonic()
                if now >= next_beat:
                    next_beat = now + HEARTBEAT_S
                    launcher.trim_captures(self.commands.values())  # output over --max-output
                    if self.owner_pid is not None and not alive(self.owner_pid):
                        log.info("owner process is gone; stopping")
                        break
                    if now - head_seen > HEAD_TIMEOUT_S:
                        log.warning("no word from the head for %.0f s; stopping", now - head_seen)
                        break
                    if now - self.sent_at >= HEARTBEAT_S:
                        self._send_head([P.HEARTBEAT])
                        self.sent_at = now
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
                msg = self.codec.decode(sig, body)
            except P.AuthError:
                log.warning("dropped a message that failed authentication")
                continue
            if from_head:
                self._from_head(msg)
            else:
                self._from_worker(ident, msg)

    def _shutdown(self) -> None:
        self.running = False
        for run in list(self.commands.values()):
            launcher.kill(run)
        for w in list(self.workers.values()):
            try:
                self._send_worker(w, [P.SHUTDOWN])
            except Exception:  # noqa: BLE001
                pass
        deadline = time.monotonic() + 2.0
        for w in list(self.workers.values()):
            # one that has not said hello may not be connected yet and never hear us
            while time.monotonic() < deadline and w.said_hello:
                pid, _ = os.waitpid(w.pid, os.WNOHANG)
                if pid:
                    break
                time.sleep(0.005)
            else:
                try:
                    os.kill(w.pid, signal.SIGKILL)
                    os.waitpid(w.pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
        for run in list(self.commands.values()):
            try:
                os.waitpid(run.pid, 0)
            except ChildProcessError:
                pass
            launcher.release(run)
            os.close(run.pidfd)
        self.commands.clear()
        self.cmd_epoll.close()
        if self.ctx is not None:
            if not self.head_gone:
                try:
                    self._send_head([P.BYE, "shutdown"])
                except Exception:  # noqa: BLE001
                    pass
            self.head.close(linger=0 if self.head_gone else 500)
            self.wsock.close(linger=0)
            self.ctx.term()
        try:
            os.unlink(f"{self.tmpdir}/workers")
        except FileNotFoundError:
            pass
        shutil.rmtree(self.tmpdir, ignore_errors=True)  # the workers' socket
