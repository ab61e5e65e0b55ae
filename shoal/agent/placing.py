"""Placing tasks that ask for resources on this node: a mixin of ``Agent``.

The agent picks the concrete CPU ids and GPU ids of each task from its free sets (the head
only counts; shoal.agent.resources holds the sets and the launch details):

- commands of more than one core, with GPUs or with MPI ranks take the slow path
  ``_start_placed`` (one-core commands without options keep the agent's fast path); both
  hand the command to the spawn helper (shoal.agent.commands);
- a command waiting for GPU devices held by others stays queued while later ones pass
  (the head counts GPUs too; this holds only what it sends beyond them);
- Python tasks with GPUs wait in ``gpu_py`` for an idle worker and free devices
  (``_dispatch_gpu_python``);
- ``--idle-timeout``: an agent with nothing to do that long drains and leaves;
- HELLO's resource fields (``_hello_info``).

The Stopping and HeadLink mixins know the agent's other queues; the overrides at the end
add ``gpu_py`` to what they drop, hand back and forget.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from shoal.agent import launcher, resources
from shoal.agent.failures import failure_info, text_info
from shoal.agent.pool import spec_attempt, spec_owner
from shoal.transport import protocol as P

if TYPE_CHECKING:
    from shoal.agent.pool import WorkerHandle

log = logging.getLogger("shoal.agent")
T_OPTS = P.T_OPTS


class Placing:
    """Mixin: the parts of ``Agent`` that place tasks with resources (module docstring)."""

    gpu_py: deque[list[Any]]
    py_gpu_held: dict[int, tuple[WorkerHandle, list[str]]]

    def _start_placed(self, spec: list[Any], cores: int, free: int, index: int) -> int | None:
        """Start the command at ``cmd_queue[index]`` with its resources: its own CPUs (bound
        when binding applies) and OMP_NUM_THREADS for more than one core, exactly its GPU
        devices, its MPI ranks over the hosts the head placed them on.

        Returns the cores it took here (0: it failed to start, its result is sent), -1 when
        fewer than it needs are free (it stays queued), None when it waits for GPUs.
        """
        opts = spec[T_OPTS] if len(spec) > T_OPTS and spec[T_OPTS] else {}
        payload = spec[3]
        hosts = None
        try:
            if opts.get("ranks"):
                hosts = resources.mpi_hosts(opts, cores, self.capacity.node)
                if hosts[0][0] != self.capacity.node:
                    log.warning("task %#x: MPI placement %r does not start on this node (%s)",
                                spec[0], hosts, self.capacity.node)
                ranks_here, cores = hosts[0][1], hosts[0][2]
            else:
                ranks_here = 1
        except resources.MpiError as exc:
            ranks_here, cores = 1, 1
            err: Exception | None = exc
        else:
            err = None
        need = min(cores * ranks_here, self.slots)  # the head never sends more than fits
        if need > free:
            return -1
        ngpus = opts.get("gpus") or 0
        gpus = None
        if ngpus and err is None:
            if ngpus * ranks_here > len(self.capacity.gpus):
                err = launcher.LaunchError(
                    f"this task asks for {ngpus * ranks_here} GPUs and agent {self.name} has "
                    f"{len(self.capacity.gpus)}")
            else:
                gpus = self.placer.take_gpus(ngpus * ranks_here)
                if gpus is None:
                    return None
        if index:
            del self.cmd_queue[index]
        else:
            self.cmd_queue.popleft()
        cpus = None
        defaults = forced = None
        if cores > 1 or hosts is not None:
            defaults = {"OMP_NUM_THREADS": str(cores)}
            if hosts is None:
                cpus = self.placer.take_cpus(need)
                if not self.placer.bind and not self.placer.warned_nobind:
                    self.placer.warned_nobind = True
                    log.info("%s", self.placer.why_not_bound(self.slots))
        if gpus:
            forced = resources.gpu_env(gpus)
        argv = None
        launched = time.monotonic() if self.trace else 0.0
        try:
            if err is not None:
                raise err
            if hosts is not None:
                pass_env = [*(payload.get("env") or {}), *(defaults or {}), *(forced or {})]
                argv, extra = resources.mpi_command(
                    payload["argv"], hosts, self.mpi_launcher, self.base_env, pass_env)
                forced = {**(forced or {}), **extra}
            run = self._hand(spec[0], payload, need, defaults=defaults, forced=forced,
                             cpus=cpus, argv=argv, mpi=hosts is not None)
        except (launcher.LaunchError, resources.MpiError, OSError) as exc:
            self.placer.give_back(cpus, gpus)
            self._result_to_head([spec[0], P.ERR, str(exc).encode(), spec_attempt(spec),
                                  failure_info(launcher.LaunchError(str(exc)))])
            return 0
        run.cpus, run.gpus, run.mpi = cpus, gpus, hosts is not None
        self._track(run, spec, need, launched)
        self._command_limit(run, self._time_limit(spec) if opts else None)
        return need

    def _dispatch_gpu_python(self) -> None:
        """Python tasks with GPUs: each to an idle worker, with devices of its own.

        The worker sets the device variables in its ``os.environ`` before the task runs
        (shoal.agent.worker), which only works if CUDA (or ROCm) was not initialized in that
        process before: a worker that ran a GPU task keeps its devices and takes later GPU
        tasks only with the same ones; a task needing others gets a fresh worker (an idle
        one is recycled: killed and forked again).
        """
        held = self.py_gpu_held
        for tid in [t for t, (w, _) in held.items() if t not in w.tasks or w.doomed]:
            _, ids = held.pop(tid)  # finished, cancelled, timed out or lost with its worker
            self.placer.give_back(None, ids)
        free = self._free_cores()
        queue = self.gpu_py
        while queue and free > 0:
            spec = queue[0]
            n = spec[T_OPTS]["gpus"]
            if not isinstance(n, int) or n > len(self.capacity.gpus):
                queue.popleft()
                text = (f"this task asks for {n!r} GPUs and agent {self.name} has "
                        f"{len(self.capacity.gpus)}")
                self._result_to_head([spec[0], P.ERR, text.encode(), spec_attempt(spec),
                                      text_info(text)])
                continue
            owner = spec_owner(spec)
            idle = [w for w in self.workers.values() if w.ready and w.credit and not w.tasks
                    and not w.doomed and (w.owner is None or owner is None or w.owner == owner)]
            avail = self.placer.free_gpus
            chosen = ids = None
            for w in idle:  # one that already uses exactly free devices, else a fresh one
                mine = w.gpu_ids
                if mine is not None and len(mine) == n and all(g in avail for g in mine):
                    chosen, ids = w, list(mine)
                    break
            if chosen is None and len(avail) >= n:
                chosen = next((w for w in idle if w.gpu_ids is None), None)
                if chosen is not None:
                    ids = avail[:n]
                else:
                    tainted = next((w for w in self.workers.values() if not w.tasks
                                    and not w.doomed and w.credit), None)
                    if tainted is not None:
                        self._recycle(tainted)  # a fresh fork takes it next time
            if chosen is None or ids is None:
                break
            queue.popleft()
            self.placer.free_gpus = [g for g in avail if g not in ids]
            chosen.gpu_ids = tuple(ids)
            held[spec[0]] = (chosen, ids)
            self._give(chosen, spec)
            # the worker sees its devices in a copy of the spec (a requeued spec has none)
            out = self.out_workers[chosen.ident]
            out[-1] = [*spec[:T_OPTS], {**spec[T_OPTS], "gpu_ids": ids}, *spec[T_OPTS + 1:]]
            free -= 1

    def _hello_info(self) -> dict[str, Any]:
        """What HELLO says besides slots, host and pid (the resource contract)."""
        end = self.alloc_end - time.monotonic() + time.time() if self.alloc_end != math.inf \
            else None
        cap = self.capacity
        return {"gpus": len(cap.gpus), "memory": cap.memory, "node": cap.node, "end_time": end}

    def _idle_check(self, now: float) -> None:
        """``--idle-timeout``: leave (drain, BYE) after that long with nothing to do."""
        if (not self.welcomed  # the clock starts when the head takes the agent, not at start-up
                or self.commands or self.cmd_queue or self.py_queue or self.pinned or self.gpu_py
                or self.out_results or any(w.tasks for w in self.workers.values())):
            self.idle_since = now
        elif now - self.idle_since >= self.idle_timeout:
            log.info("idle for %.0f s (--idle-timeout): leaving", now - self.idle_since)
            self._start_drain(now, f"idle for {now - self.idle_since:.0f} s")

    # the Stopping mixin sees the queues it knows; GPU Python tasks wait in one more
    def _drop_queued(self, tids: set[int]) -> list[int]:
        dropped = super()._drop_queued(tids)
        if self.gpu_py:
            gone = [s[0] for s in self.gpu_py if s[0] in tids]
            if gone:
                self.gpu_py = deque(s for s in self.gpu_py if s[0] not in tids)
                dropped += gone
        return dropped

    def _drop_all(self) -> int:
        held = len(self.gpu_py)
        self.gpu_py.clear()
        return held + super()._drop_all()

    def _start_drain(self, now: float, reason: str) -> None:
        if self.gpu_py and not self.draining and self.welcomed:
            self.out_return.extend(s[0] for s in self.gpu_py)
            self.gpu_py.clear()
        super()._start_drain(now, reason)
