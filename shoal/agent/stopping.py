"""How an agent stops work: time limits, cancels of running tasks, the drain, recycling.

A mixin of ``Agent`` (shoal.agent.agent): the same state, kept apart from the hot path.

- Time limits (opts "timeout", per attempt). A command gets SIGTERM on its process group
  at the limit and SIGKILL ``kill_grace`` seconds later; its result is TIMEOUT. A Python
  task is watched from outside its worker (the shared slot says which task runs there and
  since when), so one stuck in C code holding the GIL is stopped too: the worker is
  SIGKILLed, the task's result is TIMEOUT, the worker's other started tasks are LOST, its
  unstarted ones go back to the agent's queue, and a fresh worker replaces it.
- Stopping tasks wherever they are (CANCEL): queued ones are dropped (also those queued
  inside a worker: decided at once under its lock, see agent.pool), and unless the cancel
  is for queued tasks only, commands are killed and a worker that started one is killed
  and replaced.
- The drain (first SIGTERM, or the walltime minus ``drain_timeout``): DRAIN to the head,
  no new tasks, every task not started handed back (RETURN; workers give back what they
  had queued), running ones finish until the deadline, then what still runs is killed and
  handed back too, BYE "drained", exit status 0. A second SIGTERM (or SIGINT) stops at once.
- One client per worker: an idle worker bound to another client is recycled (killed and
  replaced by a fresh fork) before it may take this client's task.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import signal
import struct
import time
from typing import TYPE_CHECKING, Any

from shoal.agent import launcher
from shoal.agent.failures import allocation_end, text_info
from shoal.agent.pool import CANCEL_KEY, GIVE_BACK, SLOT_BYTES, STARTED, STOP_AT
from shoal.transport import protocol as P

if TYPE_CHECKING:
    from shoal.agent.pool import WorkerHandle

log = logging.getLogger("shoal.agent")

LIMIT_POLL_S = 0.05   # how often a worker holding a timed task not yet seen started is looked at
LOCK_WAIT_S = 1.0     # a worker holds its lock for microseconds: longer means it is stopped
_SLOT = struct.Struct("qd")
_Q = struct.Struct("q")


def _seq(spec: list[Any]) -> int:
    """The task's place in its worker's stream (0: not sent to the worker yet)."""
    return spec[P.T_SEQ] if len(spec) > P.T_SEQ else 0


class Stopping:
    """Mixin: the parts of ``Agent`` that stop work (see the module docstring)."""

    # ---- state -----------------------------------------------------------------------------
    def _init_stopping(self) -> None:
        self.draining = False
        self.drain_deadline = math.inf
        self.out_return: list[int] = []          # tids to hand back at the next flush
        self.returns_pending: set[bytes] = set() # workers asked to give back their queue
        self.finished = False                    # drained (or nothing to drain): leave now
        self.bye_reason = "shutdown"
        self.terms = 0                           # SIGTERMs received
        self.cmd_timers: list[tuple[float, int, int, launcher.Running]] = []
        self.timer_seq = 0
        self.limits_next = math.inf              # when _check_limits has work next
        self.bad_limit_logged = False
        self.wake_r = self.wake_w = -1
        now = time.monotonic()
        end = allocation_end(self.walltime, now)
        self.drain_at = math.inf if end is None else end - self.drain_timeout
        self.alloc_end = math.inf if end is None else end
        if self.drain_at <= now:
            log.warning("%.0f s left, not more than the drain timeout (%g s): leaving at once",
                        self.alloc_end - now, self.drain_timeout)

    # ---- time limits ---------------------------------------------------------------------
    def _time_limit(self, spec: list[Any]) -> float | None:
        """The spec's time limit in seconds (opts "timeout"), or None."""
        limit = spec[P.T_OPTS].get("timeout") if isinstance(spec[P.T_OPTS], dict) else None
        if limit is None:
            return None
        if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0:
            self.limits_next = 0.0  # look at it on this turn
            return float(limit)
        if not self.bad_limit_logged:
            self.bad_limit_logged = True
            log.warning("task %#x: ignored time limit %r (expected seconds > 0)", spec[0], limit)
        return None

    def _command_limit(self, run: launcher.Running, limit: float | None) -> None:
        if limit is None:
            return
        run.timeout = limit
        self._timer(run.started + limit, 0, run)

    def _timer(self, when: float, what: int, run: launcher.Running) -> None:
        self.timer_seq += 1
        heapq.heappush(self.cmd_timers, (when, self.timer_seq, what, run))
        self.limits_next = min(self.limits_next, when)

    def _limits_due(self, now: float) -> float:
        """When the loop must wake next for a limit, the walltime or the drain deadline."""
        return min(self.limits_next, self.drain_deadline if self.draining else self.drain_at)

    def _check_limits(self, now: float) -> None:
        if not self.draining and now >= self.drain_at:
            left = self.alloc_end - now
            self._start_drain(now, f"walltime: {max(0.0, left):.0f} s left")
        if now < self.limits_next:
            return
        nearest = math.inf
        timers = self.cmd_timers
        while timers and timers[0][0] <= now:
            _, _, what, run = heapq.heappop(timers)
            if run.status is not None or run.stopping == "drop":
                continue  # exited, or killed for another reason
            if what == 0:  # the limit: ask it to stop
                run.stopping = "timeout"
                run.term_sent = now
                launcher.kill(run, signal.SIGTERM)
                self._timer(now + self.kill_grace, 1, run)
            else:          # the grace is over
                launcher.kill(run, signal.SIGKILL)
        if timers:
            nearest = timers[0][0]
        slots = self.running_slots
        for w in list(self.workers.values()):
            if not w.timed or w.doomed:
                continue
            tid, t0 = _SLOT.unpack_from(slots, SLOT_BYTES * w.index)
            if tid in w.timed and tid not in w.started:
                if struct.unpack_from("q", slots, SLOT_BYTES * w.index)[0] == tid:  # the same
                    w.started[tid] = t0
            expired = 0
            for t, began in w.started.items():
                limit = w.timed.get(t)
                if limit is None:
                    continue
                deadline = began + limit
                if deadline <= now:
                    expired = t
                    break
                nearest = min(nearest, deadline)
            if expired:
                self._python_timeout(w, expired)
            elif len(w.started) < len(w.timed):  # some not seen starting yet: look again soon
                nearest = min(nearest, now + LIMIT_POLL_S)
        self.limits_next = nearest

    def _python_timeout(self, w: WorkerHandle, tid: int) -> None:
        limit = w.timed[tid]
        spec = w.tasks.get(tid)
        if spec is None:  # its result came meanwhile
            return
        began = w.started.get(tid)  # monotonic
        started, unstarted = self._kill_worker(w)
        text = f"timed out after {limit:g} s (its worker {w.index}, pid {w.pid}, was killed)"
        log.info("task %#x %s", tid, text)
        item = [tid, P.TIMEOUT, text.encode(), spec[P.T_ATTEMPT] if len(spec) > P.T_ATTEMPT
                else None, text_info(text)]
        if self.trace:  # traced: when it started and ran out, on which worker (monotonic)
            item.append([spec[P.T_LAUNCH] if len(spec) > P.T_LAUNCH else None, began,
                         time.monotonic(), None, None, w.index])
        self._result_to_head(item)
        why = (f"worker {w.index} (pid {w.pid}) on {self.name} was killed while running this "
               f"task, because task {tid:#x} on it timed out")
        for s in started:
            if s[0] != tid:
                self._result_to_head([s[0], P.LOST, why.encode(), s[P.T_ATTEMPT]
                                      if len(s) > P.T_ATTEMPT else None, text_info(why)], s)
        self._requeue_front(unstarted)

    # ---- stopping tasks wherever they are ---------------------------------------------------
    def _drop_queued(self, tids: set[int]) -> list[int]:
        dropped = [s[0] for s in self.py_queue if s[0] in tids]
        dropped += [s[0] for s in self.cmd_queue if s[0] in tids]
        for q in self.pinned.values():
            dropped += [s[0] for s in q if s[0] in tids]
        if dropped:
            gone = set(dropped)
            self.py_queue = type(self.py_queue)(s for s in self.py_queue if s[0] not in gone)
            self.cmd_queue = type(self.cmd_queue)(s for s in self.cmd_queue if s[0] not in gone)
            for q in self.pinned.values():
                kept = [s for s in q if s[0] not in gone]
                q.clear()
                q.extend(kept)
        return dropped

    def _stop_tasks(self, tids: set[int], running: bool = True) -> list[int]:
        """Stop these tasks wherever they are (``running`` False: only those not started);
        nothing is sent for them afterwards.

        Returns those dropped or stopped here (the others were not here, had started, or
        finished). The answer is exact at once: a task queued in a worker has started
        or not as the worker's shared record says, read under its lock (see agent.pool);
        one not started is then dropped and never runs.
        """
        stopped = self._drop_queued(tids)
        for run in self.commands.values():
            if running and run.tid in tids and run.stopping != "drop":
                run.stopping = "drop"
                launcher.kill(run)
                stopped.append(run.tid)
        for w in list(self.workers.values()):
            if w.doomed or not w.tasks:
                continue
            hit = [t for t in w.tasks if t in tids]
            if not hit:
                continue
            unsent = self._take_unsent(w, set(hit))  # still in this turn's TASKS to it
            stopped.extend(unsent)
            hit = [t for t in hit if t not in unsent]
            if not hit:
                continue
            queued, begun = self._claim_queued(w, hit)
            if begun and running:
                started, unstarted = self._kill_worker(w)
                log.info("stopped %d tasks by killing worker %d (pid %d)", len(hit), w.index, w.pid)
                why = (f"worker {w.index} (pid {w.pid}) on {self.name} was killed while running "
                       "this task, to stop a cancelled task on it")
                for s in started:
                    if s[0] not in tids:
                        self._result_to_head([s[0], P.LOST, why.encode(), s[P.T_ATTEMPT]
                                              if len(s) > P.T_ATTEMPT else None, text_info(why)],
                                             s)
                self._requeue_front([s for s in unstarted if s[0] not in tids])
                stopped.extend(hit)
            else:
                stopped.extend(queued)
        return stopped

    def _take_unsent(self, w: WorkerHandle, tids: set[int]) -> list[int]:
        """Take back tasks given to ``w`` this turn but not sent yet: they never ran."""
        out = self.out_workers.get(w.ident)
        if not out:
            return []
        taken = [s[0] for s in out if s[0] in tids]
        if taken:
            gone = set(taken)
            out[:] = [s for s in out if s[0] not in gone]
            self._forget(w, taken)
        return taken

    def _forget(self, w: WorkerHandle, tids: list[int]) -> None:
        for t in tids:
            del w.tasks[t]
            w.queued_s -= w.est.pop(t, 0.0)
            w.timed.pop(t, None)
            w.started.pop(t, None)

    def _claim_queued(self, w: WorkerHandle, hit: list[int]) -> tuple[list[int], list[int]]:
        """Split tasks sent to ``w`` into (queued there: now dropped, they never start;
        begun: started, blocked on sub-tasks, or finished with their result on its way).

        Under the worker's lock: the tasks past the last one it started cannot start any
        more (STOP_AT) until it reads the CANCEL sent here, which drops them.
        """
        tasks = w.tasks
        base = SLOT_BYTES * w.index
        if not w.lock.acquire(True, LOCK_WAIT_S):  # stopped (SIGSTOP) or dying: unknown
            log.warning("worker %d (pid %d) did not release its lock: %d tasks left to run",
                        w.index, w.pid, len(hit))
            return [], hit
        try:
            started = _Q.unpack_from(self.running_slots, base + STARTED)[0]
            queued = [t for t in hit if t not in w.blocked and _seq(tasks[t]) > started]
            if queued:
                w.cancel_key += 1
                stop = min(_Q.unpack_from(self.running_slots, base + STOP_AT)[0],
                           min(_seq(tasks[t]) for t in queued))
                _Q.pack_into(self.running_slots, base + STOP_AT, stop)
                _Q.pack_into(self.running_slots, base + CANCEL_KEY, w.cancel_key)
        finally:
            w.lock.release()
        if queued:
            self._forget(w, queued)
            self._send_worker(w, [P.CANCEL, w.cancel_key, queued])
        gone = set(queued)
        return queued, [t for t in hit if t not in gone]

    def _started(self, tids: set[int]) -> list[int]:
        """Which of ``tids`` held here have started (STATE, for ``Future.running()``):
        running commands, and tasks a worker started (running, blocked or just finished)."""
        out = [run.tid for run in self.commands.values() if run.tid in tids]
        for w in self.workers.values():
            if w.doomed or not w.tasks:
                continue
            unsent = {s[0] for s in self.out_workers.get(w.ident, ())}
            hit = [t for t in w.tasks if t in tids and t not in unsent]
            if hit:  # STARTED only grows: a read without the lock is at worst a moment old
                started = _Q.unpack_from(self.running_slots, SLOT_BYTES * w.index + STARTED)[0]
                out += [t for t in hit if t in w.blocked or 0 < _seq(w.tasks[t]) <= started]
        return out

    def _recycle(self, w: WorkerHandle) -> None:
        """Replace an idle worker bound to one client by a fresh fork."""
        if not w.doomed:
            log.debug("recycling worker %d (client %s)", w.index, w.owner)
            self._kill_worker(w)

    # ---- the drain ------------------------------------------------------------------------------
    def _start_drain(self, now: float, reason: str) -> None:
        if self.draining or self.finished:
            return
        if not self.welcomed:  # nothing is held before WELCOME
            log.info("asked to leave (%s) before joining a head; leaving", reason)
            self.finished = True
            self.head_gone = True  # no BYE to a head that does not know us
            return
        self.draining = True
        self.drain_deadline = min(now + self.drain_timeout, max(now, self.alloc_end))
        if self.out_results:  # what finished so far goes first
            res, self.out_results = self.out_results, []
            self._send_head([P.RESULTS, res, self.trace_times.take(len(res))] if self.trace
                            else [P.RESULTS, res])
        self._send_head([P.DRAIN, reason])
        queued = [s[0] for s in self.py_queue] + [s[0] for s in self.cmd_queue]
        for q in self.pinned.values():
            queued += [s[0] for s in q]
        self.py_queue.clear()
        self.cmd_queue.clear()
        self.pinned.clear()
        self.out_return.extend(queued)
        for w in self.workers.values():
            if w.tasks and not w.doomed:
                # the flag is seen between two tasks; the message wakes an idle worker and
                # follows any TASKS still in flight to it
                self.running_slots[SLOT_BYTES * w.index + GIVE_BACK] = 1
                self._send_worker(w, [P.RETURN])
                self.returns_pending.add(w.ident)
        running = sum(1 for r in self.commands.values() if r.stopping != "drop")
        running += sum(len(w.tasks) for w in self.workers.values())
        log.info("draining (%s): handing back %d queued tasks; %d held by workers and "
                 "commands may finish within %.0f s", reason, len(queued), running,
                 self.drain_deadline - now)

    def _worker_returned(self, w: WorkerHandle, tids: list[int]) -> None:
        """A worker's answer to RETURN: the tasks it had queued and now forgot."""
        self.returns_pending.discard(w.ident)
        back = 0
        for t in tids:
            if w.tasks.pop(t, None) is not None:
                w.queued_s -= w.est.pop(t, 0.0)
                w.timed.pop(t, None)
                self.out_return.append(t)
                back += 1
        if back:
            log.info("worker %d handed back %d tasks it had queued", w.index, back)

    def _worker_gone(self, w: WorkerHandle) -> None:
        self.returns_pending.discard(w.ident)

    def _drain_step(self, now: float) -> None:
        if now >= self.drain_deadline:
            left: list[int] = []
            for run in self.commands.values():
                if run.stopping != "drop":
                    run.stopping = "drop"
                    launcher.kill(run)
                    left.append(run.tid)
            for w in list(self.workers.values()):
                if w.tasks and not w.doomed:
                    started, unstarted = self._kill_worker(w)
                    left += [s[0] for s in started] + [s[0] for s in unstarted]
            self.out_return.extend(left)
            log.warning("drain deadline: killed and handed back %d running tasks", len(left))
            self._drained()
            return
        if self.returns_pending:
            return
        if any(r.stopping != "drop" for r in self.commands.values()):
            return
        if any(w.tasks for w in self.workers.values()):
            return
        self._drained()

    def _drained(self) -> None:
        log.info("drained; leaving")
        self.finished = True
        self.bye_reason = "drained"

    # ---- signals -------------------------------------------------------------------------------
    def _watch_signals(self) -> int | None:
        """Route SIGTERM/SIGINT/SIGCONT through a pipe the loop polls; its read end."""
        try:
            r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: signals stay with whoever runs it
            return None
        self.wake_r, self.wake_w = r, w
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCONT):
            signal.signal(sig, _noted)
        self.poller.register(r, 1)  # zmq.POLLIN
        return r

    def _unwatch_signals(self) -> None:
        if self.wake_r >= 0:
            signal.set_wakeup_fd(-1)
            os.close(self.wake_r)
            os.close(self.wake_w)
            self.wake_r = self.wake_w = -1

    def _signalled(self, now: float) -> None:
        try:
            data = os.read(self.wake_r, 512)
        except BlockingIOError:
            return
        for signum in data:
            if signum == signal.SIGCONT:
                self.head_seen = now  # it may have been stopped: a fresh timeout
            elif signum == signal.SIGTERM and self.terms == 0:
                self.terms += 1
                self._start_drain(now, "SIGTERM")
            elif signum in (signal.SIGTERM, signal.SIGINT):
                log.info("%s: stopping now", signal.Signals(signum).name)
                self.running = False


def _noted(*_: object) -> None:
    """The Python-level handler: the wakeup pipe carries the signal to the loop."""
