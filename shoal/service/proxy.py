"""The job runner's side of ``shoal serve --connect``: an executor that asks the service.

Inside the job's sandbox (no network) the runner compiles the script and runs the plan with
:func:`shoal.script.runner.run_plan`, as a local job does; with ``--connect`` the executor it
runs on is this one: each command becomes a request on a pipe to the service, which runs it
in a per-command sandbox on an agent of the runtime (``connect.py``) and answers when it
ends. The protocol is JSON lines, one object each:

runner -> service: ``{"op": "agents"}``; ``{"op": "submit", "id": N, "argv": [...],
"cwd": "/work", "after": [ids], "prefer": AGENT | null}``; ``{"op": "cancel", "id": N}``.

service -> runner: ``{"op": "agents", "agents": [{"name", "host", "slots"}]}``;
``{"op": "done", "id": N, "rc": STATUS, "stderr": BASE64, "agent": NAME}`` or with
``"error": "one line"`` (not run: a dependency failed, the job is stopping).
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import itertools
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shoal.task.command import Command, CommandResult


@dataclass(frozen=True)
class ProxyAgent:
    """An agent of the service's runtime, as the runner sees it (``Executor.agents()``)."""

    name: str
    host: str
    slots: int


class ProxyFuture(cf.Future):  # type: ignore[type-arg]
    """A command's future; ``agent`` is where it ran (as ``ShoalFuture.agent``)."""

    def __init__(self, owner: ProxyExecutor, ident: int) -> None:
        super().__init__()
        self.agent: str | None = None
        self._owner, self._id = owner, ident

    def cancel(self, *, running: bool = False) -> bool:  # type: ignore[override]
        """Ask the service to drop or stop the command (queued or running alike)."""
        if self.done():
            return self.cancelled()
        self._owner._send({"op": "cancel", "id": self._id})
        return super().cancel()


class _Options:
    def __init__(self, ex: ProxyExecutor, after: Sequence[cf.Future], prefer: str | None
                 ) -> None:  # type: ignore[type-arg]
        self.ex, self.after, self.prefer = ex, after, prefer

    def submit(self, cmd: Command) -> ProxyFuture:
        return self.ex._submit(cmd, self.after, self.prefer)


class ProxyExecutor:
    """The part of :class:`shoal.Executor` that the script runner uses, over two pipes."""

    def __init__(self, req_fd: int, resp_fd: int) -> None:
        os.set_inheritable(req_fd, False)  # none of the runner's children gets them
        os.set_inheritable(resp_fd, False)
        self._out = os.fdopen(req_fd, "w", encoding="utf-8")
        self._in = os.fdopen(resp_fd, "r", encoding="utf-8")
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._futs: dict[int, ProxyFuture] = {}
        self._agents: list[ProxyAgent] | None = None
        self._agents_ev = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True, name="proxy-reader")
        self._reader.start()

    def _send(self, obj: dict[str, Any]) -> None:
        with self._lock:
            try:
                self._out.write(json.dumps(obj) + "\n")
                self._out.flush()
            except (OSError, ValueError):
                pass  # the service is stopping the job

    def _read(self) -> None:
        for line in self._in:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            op = msg.get("op")
            if op == "agents":
                self._agents = [ProxyAgent(str(a["name"]), str(a["host"]), int(a["slots"]))
                                for a in msg.get("agents", [])]
                self._agents_ev.set()
            elif op == "done":
                fut = self._futs.pop(int(msg["id"]), None)
                if fut is None or fut.done():
                    continue
                fut.agent = msg.get("agent")
                if msg.get("error"):
                    fut.set_exception(RuntimeError(str(msg["error"])))
                else:
                    err = base64.b64decode(msg.get("stderr") or "")
                    fut.set_result(CommandResult(int(msg["rc"]), None, err,
                                                 duration=float(msg.get("wall") or 0.0)))
        # the service closed the pipe: what is left never finishes
        self._agents_ev.set()
        for fut in list(self._futs.values()):
            if not fut.done():
                fut.set_exception(RuntimeError("the service stopped the job"))

    def agents(self, timeout: float = 60.0) -> list[ProxyAgent]:
        """The runtime's agents (for the runner's locality choices)."""
        self._send({"op": "agents"})
        self._agents_ev.wait(timeout)
        return list(self._agents or [])

    def _submit(self, cmd: Command, after: Sequence[cf.Future], prefer: str | None
                ) -> ProxyFuture:  # type: ignore[type-arg]
        ident = next(self._ids)
        fut = ProxyFuture(self, ident)
        self._futs[ident] = fut
        deps = [f._id for f in after if isinstance(f, ProxyFuture)]
        self._send({"op": "submit", "id": ident, "argv": cmd.argv(), "cwd": cmd.cwd or "/work",
                    "after": deps, "prefer": prefer})
        return fut

    def submit(self, cmd: Command) -> ProxyFuture:
        """Run ``cmd`` (a :class:`Command`) on an agent, in the job's sandbox there."""
        return self._submit(cmd, (), None)

    def options(self, *, after: Sequence[cf.Future] = (), prefer: str | None = None,
                **_: Any) -> _Options:  # type: ignore[type-arg]
        """``after=`` and ``prefer=`` as :meth:`shoal.Executor.options`."""
        return _Options(self, after, prefer)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Cancel what is still queued (``cancel_futures``); ``wait`` for the rest."""
        if cancel_futures:
            for fut in list(self._futs.values()):
                fut.cancel()
        if wait:
            cf.wait(list(self._futs.values()))
