"""What a running head tells ``shoal status`` and a map's progress line (STATS with a
detail field, see :mod:`shoal.transport.protocol`).

The head keeps only a little for it: a bounded ring of the last failed attempts, two
counters and one (time, completed) sample per heartbeat for the rate. Everything else is
read from the scheduler core when asked, in time that grows with the agents, not with
the tasks: a head with a million queued tasks answers as fast as an idle one.

Results cost one C-level pass (``any(map(...))`` over their ``info`` fields, which the
protocol leaves None unless an attempt failed) per RESULTS message; only a message that
holds a failure is looked at item by item.
"""

from __future__ import annotations

import time
from collections import deque
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from shoal.head.need import BACKOFF, DISPATCHED
from shoal.transport.protocol import (
    CHUNK,
    CMD,
    ERR,
    LOST,
    OK,
    T_ATTEMPT,
    T_FID,
    T_KIND,
    T_PAYLOAD,
    TIMEOUT,
)

if TYPE_CHECKING:
    from shoal.head.core import SchedulerCore

FAILURES_KEPT = 200        # failed attempts remembered (the newest)
FAILURES_SHOWN = 20        # sent when the request does not say
RATE_WINDOW_S = 10.0       # the rate is tasks completed over about this many seconds
NAMES_KEPT = 100_000       # function names (one per function a client sent)
LABEL_MAX = 160

_INFO = itemgetter(4)
_WORD = {ERR: "raised", LOST: "lost", TIMEOUT: "timed out", OK: "exit status"}


class StatusBook:
    """The head's record for status requests: recent failures, counters, rate samples."""

    def __init__(self) -> None:
        self.started = time.time()
        self.failures: deque[dict[str, Any]] = deque(maxlen=FAILURES_KEPT)
        self.failed_attempts = 0   # attempts that failed (raised, lost, timed out, exit != 0)
        self.failed_tasks = 0      # ... and were not run again: the task's outcome
        self.names: dict[int, str] = {}
        self.samples: deque[tuple[float, int]] = deque(maxlen=4 * int(RATE_WINDOW_S) + 8)

    # ---- fed by the server ------------------------------------------------------------------
    def add_names(self, names: Any) -> None:
        """SUBMIT's function names (fid -> "module.qualname"), to label failures."""
        if names and isinstance(names, dict):
            if len(self.names) > NAMES_KEPT:
                self.names.clear()
            self.names.update(names)

    def sample(self, now: float, completed: int) -> None:
        """Once per heartbeat: the rate is measured between these."""
        self.samples.append((now, completed))

    def results(self, core: SchedulerCore, agent: bytes, items: list[list[Any]]
                ) -> list[dict[str, Any]] | None:
        """The failed attempts among an agent's results, read before the core takes them
        (it reuses the lists); None when there is none (nearly always)."""
        if not any(map(_INFO, items)):  # the protocol: info is None unless it failed
            return None
        out = []
        where = agent.decode(errors="replace")
        tasks = core.tasks
        for item in items:
            status = item[1]
            info = item[4] if len(item) > 4 else None
            if status == OK:
                if not info:
                    continue
            elif status not in (ERR, LOST, TIMEOUT):
                continue
            task = tasks.get(item[0])
            if task is None or task.agent != agent or task.state != DISPATCHED:
                continue  # a stale attempt: the core drops it
            attempt = item[3] if len(item) > 3 else None
            if attempt is not None and attempt != task.spec[T_ATTEMPT]:
                continue
            why = info.get("why") if isinstance(info, dict) else None
            if not why:
                payload = item[2]
                why = (payload.decode(errors="replace") if isinstance(payload, bytes)
                       and status in (LOST, TIMEOUT) else _WORD.get(status, "failed"))
            out.append(self._record(task, where, status, why))
        return out or None

    def agent_lost(self, core: SchedulerCore, agent: bytes, reason: str
                   ) -> list[dict[str, Any]] | None:
        """The attempts an agent held when it was declared lost (before the core
        requeues or fails them)."""
        state = core.agents.get(agent)
        if state is None or not state.running:
            return None
        where = agent.decode(errors="replace")
        out = []
        for tid in sorted(state.running):
            task = core.tasks.get(tid)
            if task is not None and task.state == DISPATCHED and task.agent == agent:
                out.append(self._record(task, where, LOST, f"agent {where} was lost: {reason}"))
        return out or None

    def settle(self, core: SchedulerCore, records: list[dict[str, Any]]) -> None:
        """After the core decided: a task still live was retried, a task gone failed."""
        for rec in records:
            rec["retried"] = rec["tid"] in core.tasks
            self.failed_attempts += 1
            if not rec["retried"]:
                self.failed_tasks += 1
            self.failures.append(rec)

    def _record(self, task: Any, agent: str, status: int, why: str) -> dict[str, Any]:
        return {"time": time.time(), "tid": task.tid, "task": self.label(task.spec),
                "agent": agent, "attempt": task.spec[T_ATTEMPT], "status": _WORD.get(status, "failed"),
                "why": why[:300]}

    def label(self, spec: list[Any]) -> str:
        """A task in one line: its command line, or its function's name."""
        kind = spec[T_KIND]
        if kind == CMD:
            payload = spec[T_PAYLOAD]
            argv = payload.get("argv") if isinstance(payload, dict) else None
            if isinstance(argv, list) and len(argv) == 3 and argv[:2] == ["/bin/sh", "-c"]:
                text = str(argv[2])
            elif isinstance(argv, list):
                text = " ".join(map(str, argv))
            else:
                text = "command"
            text = " ".join(text.split())
        else:
            fid = spec[T_FID]
            text = self.names.get(fid) or f"function {fid:#x}"
            if kind == CHUNK:
                text += " (map chunk)"
        return text if len(text) <= LABEL_MAX else text[: LABEL_MAX - 3] + "..."

    # ---- the answer ----------------------------------------------------------------------------
    def snapshot(self, head: Any, detail: Any) -> dict[str, Any]:
        """The head's ``stats()`` and, as ``detail`` asks (a dict: ``agents`` bool,
        ``failures`` count), its agents and the newest failed attempts."""
        detail = detail if isinstance(detail, dict) else {}
        core = head.core
        out = head.stats()
        want_agents = bool(detail.get("agents", True))
        nfail = detail.get("failures", FAILURES_SHOWN)
        nfail = nfail if isinstance(nfail, int) and not isinstance(nfail, bool) and nfail >= 0 else FAILURES_SHOWN
        agents = []
        dispatched = running = busy = gpus_used = 0
        for a in core.agents.values():
            n = len(a.running)
            free = max(0, a.slots - a.held)
            # The head does not hear when a task starts: what fits in the agent's cores
            # runs, the rest waits there (prefetch). Estimated from the cores they ask.
            r = n if a.inflight <= free else (n * free) // max(1, a.inflight)
            use = min(a.slots, a.inflight + a.held)
            dispatched += n
            running += r
            busy += use
            gpus_used += a.gpus_used
            if want_agents:
                peer = head.peers.get(a.name)
                info = peer.info if peer is not None else {}
                agents.append({"name": a.name.decode(errors="replace"), "num": a.num,
                               "node": a.node, "host": str(info.get("host", "")),
                               "slots": a.slots, "busy": use, "gpus": a.gpus, "gpus_used": a.gpus_used,
                               "memory": a.memory, "memory_used": a.mem_used,
                               "running": r, "queued": n - r, "draining": a.draining})
        ready = core.queued() + core.placed + len(core.pending_static)
        backoff = 0
        for _, tid in head._later:
            task = core.tasks.get(tid)
            if task is not None and task.state == BACKOFF:
                backoff += 1
        waiting = max(0, len(core.tasks) - ready - backoff - dispatched)
        now = time.monotonic()
        out.update({
            "time": time.time(), "uptime": time.time() - self.started,
            "dispatched": dispatched, "running": running, "busy": busy, "gpus_used": gpus_used,
            "gpus": sum(a.gpus for a in core.agents.values()),
            "queue": {"ready": ready, "waiting": waiting, "backoff": backoff},
            "failed": self.failed_tasks, "failed_attempts": self.failed_attempts,
            "rate": self._rate(now, core.completed), "paused": bool(core.paused),
        })
        if want_agents:
            out["agent_list"] = agents
        out["failures"] = list(self.failures)[-nfail:] if nfail else []
        return out

    def _rate(self, now: float, completed: int) -> float:
        """Tasks completed per second over the last ~RATE_WINDOW_S."""
        since = now - RATE_WINDOW_S
        for t, c in self.samples:
            if t >= since - 1e-9:
                span = now - t
                return (completed - c) / span if span > 0.5 else 0.0
        return 0.0
