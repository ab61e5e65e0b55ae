"""An agent's link to its head: connect, HELLO/WELCOME, loss, reconnect, eviction.

A mixin of ``Agent`` (shoal.agent.agent). The head is lost when it says nothing for
``timeout_s`` (from WELCOME): the agent stops its tasks and exits with status 3, or, with
``reconnect`` seconds, drops its tasks, keeps its warm workers, and waits that long for a
head on the same connection file (re-read every second: a restarted head has a new
address and secret), then joins it as a new agent. EVICTED (the head declared this agent
lost, e.g. after a SIGSTOP or a network cut) drops every task and joins again at once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import zmq

from shoal.agent import launcher
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection
from shoal.transport.session import PeerSession, retry_soon, secure_client, server_key

log = logging.getLogger("shoal.agent")

HEARTBEAT_S = 1.0       # until WELCOME says otherwise
HEAD_TIMEOUT_S = 8.0    # until WELCOME says otherwise
EXIT_OK, EXIT_BAD_ARGS, EXIT_HEAD_LOST = 0, 2, 3


class HeadLink:
    """Mixin: the head connection of ``Agent`` (see the module docstring)."""

    def _welcomed(self, info: dict[str, Any]) -> None:
        self.welcomed = True
        self.reconnect_until = None
        self.prefetch = int(info.get("prefetch", 1))
        self.origin_base = int(info["origin"])
        self.heartbeat_s = float(info.get("heartbeat_s") or HEARTBEAT_S)
        self.timeout_s = float(info.get("timeout_s") or HEAD_TIMEOUT_S)
        self.sent_window = -1   # the first credit: every slot plus its prefetch
        self.trace = bool(info.get("trace"))  # attach times to results (shoal.trace)
        self.run_slots = int(info.get("slots") or 0)  # the run's, as this agent joined
        if self.trace:
            from shoal.trace.columns import AgentTimes  # only traced agents pay its import

            self.trace_times = AgentTimes()
        for w in list(self.workers.values()):
            self._welcome_worker(w)

    def _drop_all(self) -> int:
        """Forget every task this agent holds: kill running commands and the workers that
        hold tasks (fresh ones replace them); nothing about them is sent afterwards."""
        held = len(self.py_queue) + len(self.cmd_queue) + sum(map(len, self.pinned.values()))
        self.py_queue.clear()
        self.cmd_queue.clear()
        self.pinned.clear()
        for run in self.commands.values():
            if run.stopping != "drop":
                held += 1
                run.stopping = "drop"
                launcher.kill(run)
        for w in list(self.workers.values()):
            if w.tasks and not w.doomed:
                held += len(w.tasks)
                self._kill_worker(w)
        self.out_results.clear()
        if self.trace_times is not None:
            self.trace_times.clear()
        self.out_submit.clear()
        self.out_funcs.clear()
        self.out_return.clear()
        self._child_results.clear()
        return held

    def _evicted(self, reason: str) -> None:
        held = self._drop_all()
        if self.draining:  # leaving anyway: the head no longer counts on anything here
            log.warning("evicted by the head (%s) while draining: dropped %d tasks; leaving",
                        reason, held)
            self.finished = True
            self.head_gone = True
            return
        log.warning("evicted by the head (%s): dropped %d tasks; joining again as a new agent",
                    reason, held)
        self.welcomed = False
        self._hello()

    def _connect_head(self) -> None:
        """A fresh DEALER to ``self.address`` (the first, or after the head was lost)."""
        if self.head is not None:
            self.poller.unregister(self.head)
            self.head.close(linger=0)
        self.connects += 1
        ident = self.name if self.connects == 1 else f"{self.name}.r{self.connects - 1}"
        self.head = self.ctx.socket(zmq.DEALER)
        self.head.setsockopt(zmq.IDENTITY, ident.encode())
        self.head.setsockopt(zmq.SNDHWM, 0)
        self.head.setsockopt(zmq.RCVHWM, 0)
        self.head.setsockopt(zmq.LINGER, 2000)
        retry_soon(self.head, self.address)  # a head starting beside us
        self.codec.ident = ident.encode()  # to take a restarted head's "no session" EVICTED
        secure_client(self.head, self.server_key)
        self.head.connect(self.address)
        self.poller.register(self.head, zmq.POLLIN)

    def _hello(self) -> None:
        self.head_seen = time.monotonic()
        self._send_head([P.HELLO, "agent", {"slots": self.slots, "host": socket.gethostname(),
                                              "pid": os.getpid(), **self._hello_info()}])

    def _head_lost(self, now: float) -> None:
        silent = now - self.head_seen
        if self.reconnect > 0 and self.reconnect_until is None and not self.draining:
            held = self._drop_all()
            log.warning("no word from the head for %.0f s: dropped %d tasks; waiting up to "
                        "%g s for a head on %s", silent, held, self.reconnect,
                        self.connection_file or self.address)
            self.welcomed = False
            self.reconnect_until = now + self.reconnect
            self.conn_checked = 0.0
            self._connect_head()
            self._hello()
            return
        if self.reconnect_until is not None:
            log.warning("no head came back within %g s; stopping (exit status 3)", self.reconnect)
        else:
            log.warning("no word from the head for %.0f s; stopping its tasks (exit status 3)",
                        silent)
        self.exit_code = EXIT_HEAD_LOST
        self.head_gone = True
        self.running = False

    def _watch_connection_file(self, now: float) -> None:
        """While waiting for a new head: re-read the connection file every second."""
        if self.connection_file is None or now - self.conn_checked < 1.0:
            return
        self.conn_checked = now
        try:
            conn = Connection.read(self.connection_file)
        except (OSError, ValueError):
            return  # being rewritten, or not there yet
        if conn.address != self.address or conn.key != self.key:
            log.info("the connection file now names %s; joining there", conn.address)
            self.address, self.key = conn.address, conn.key
            self.codec = PeerSession(conn.key)
            self.server_key = server_key(conn)
            self._connect_head()
            self._hello()
