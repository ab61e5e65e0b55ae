"""The head process: one ROUTER socket, the scheduler core, and batching of every send.

Peers (clients and agents) connect with DEALER sockets. The loop drains every message
that is waiting, feeds each to the scheduler core, and only then flushes: one TASKS
message per agent and one RESULTS message per owner per turn, however many tasks they
carry. The head never unpickles user data: payloads pass through as bytes.
"""

from __future__ import annotations

import heapq
import logging
import math
import socket
import time
from collections import defaultdict
from typing import Any

import zmq

from shoal._sys import alive
from shoal.head.core import T_FID, T_KIND, TURN_TASKS, Decisions, SchedulerCore
from shoal.head.journal import Journal, JournalError
from shoal.head.need import DISPATCHED
from shoal.head.status import StatusBook
from shoal.trace.store import RETURNED, Recorder
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection
from shoal.transport.keys import KeyCounter, given_key
from shoal.transport.session import HeadSessions, NoSession, secure_server

log = logging.getLogger("shoal.head")

HEARTBEAT_S = 1.0
TIMEOUT_S = 8.0            # a peer silent this long is lost (detected within ~9 s)
ORIGINS_PER_AGENT = 1 << 16  # tid origins an agent may hand to worker incarnations
EVICT_EVERY_S = 1.0        # at most one EVICTED per second to a peer we do not know


def agent_resources(ident: bytes, info: dict[str, Any]) -> dict[str, Any]:
    """An agent's HELLO resources for the core: gpus, memory (bytes, 0: not counted), node
    (its launchers' node name, else its name) and end_time (epoch seconds or None). A bad
    value is logged and read as none."""
    out: dict[str, Any] = {"gpus": 0, "memory": 0, "node": ident.decode(errors="replace"),
                           "end_time": None}
    for key in ("gpus", "memory"):
        v = info.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            log.warning("agent %r: HELLO %s=%r is not a count; taken as 0", ident[:64], key, v)
        else:
            out[key] = v
    node = info.get("node")
    if isinstance(node, str) and node:
        out["node"] = node
    end = info.get("end_time")
    if isinstance(end, (int, float)) and not isinstance(end, bool):
        out["end_time"] = float(end)
    elif end is not None:
        log.warning("agent %r: HELLO end_time=%r is not a time; taken as unknown", ident[:64], end)
    return out


class Peer:
    __slots__ = ("ident", "role", "sent_fids", "last_seen", "slots", "info", "num", "keys")

    def __init__(self, ident: bytes, role: str, info: dict[str, Any]) -> None:
        self.ident = ident
        self.role = role
        self.sent_fids: set[int] = set()
        self.last_seen = time.monotonic()
        self.slots = int(info.get("slots", 0))
        self.info = info
        self.num = 0  # agents: a small number stamped on the results they return
        self.keys: KeyCounter | None = None  # clients, while journaled: their tasks' keys


class Head:
    """Runs the head loop until told to shut down (or its owner process dies)."""

    def __init__(
        self,
        conn: Connection,
        bind: str | None = None,
        prefetch: int = 1,
        owner_pid: int | None = None,
        exit_when_idle: bool = False,
        heartbeat_timeout: float | None = None,
        crash_limit: int = 3,
        journal: str | None = None,
        expect_agents: int = 0,
        expect_timeout: float = 60.0,
        trace: str | None = None,
        big_first: bool = False,
        plan: bool = False,
    ) -> None:
        """``expect_agents``: hold the first dispatch until that many agents joined or
        ``expect_timeout`` seconds passed, so a map spreads over the whole allocation.
        ``trace``: a file to record every attempt of every task in (shoal.trace).
        ``big_first``: the core's policy for mixes of large and small tasks; ``plan``: it
        plans tasks with estimates over the agents in time (shoal.head.planning)."""
        if heartbeat_timeout is not None and heartbeat_timeout <= 0:
            raise ValueError(f"the heartbeat timeout must be > 0 seconds, not {heartbeat_timeout}")
        if crash_limit < 1:
            raise ValueError(f"the crash limit must be at least 1, not {crash_limit}")
        if expect_agents < 0 or expect_timeout < 0:
            raise ValueError(f"--expect-agents {expect_agents} / --expect-timeout {expect_timeout}: "
                             "must not be negative")
        # journal: opened before the socket, so a bad file stops the head before it binds
        self.journal = Journal(journal) if journal else None
        self.from_journal = 0
        if self.journal is not None:
            log.info("journal %s: run %d, %d results from earlier runs", journal,
                     self.journal.run, self.journal.resumable)
        # trace (shoal.trace.store): None when off, and then nothing of it runs
        self.tracer = Recorder(trace, conn.run_id) if trace else None
        self.status = StatusBook()  # `shoal status`: recent failures, counters, rate
        self.conn = conn
        self.sessions = HeadSessions(conn.key)  # per-connection keys and sequence numbers
        self.timeout_s = heartbeat_timeout or TIMEOUT_S
        # beat often enough that a few lost beats never look like a lost peer
        self.heartbeat_s = min(HEARTBEAT_S, self.timeout_s / 4)
        self.core = SchedulerCore(crash_limit=crash_limit, big_first=big_first, plan=plan)
        self.core.defer_fill = True  # submissions are placed once per turn (_flush)
        if self.tracer is not None:
            self.tracer.live = self.core.tasks
        # waiting for the allocation's agents: dispatch held until then (0: no deadline)
        self.expect_agents = expect_agents
        self._expect_until = time.monotonic() + expect_timeout if expect_agents else 0.0
        self.core.paused = expect_agents > 0
        self.prefetch = max(0, prefetch)
        self.owner_pid = owner_pid
        self.exit_when_idle = exit_when_idle
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        secure_server(self.sock, conn)  # CURVE when the connection file says so
        self.sock.bind(bind or conn.address)
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.peers: dict[bytes, Peer] = {}
        self.funcs: dict[int, bytes] = {}
        self.consts: list[int] = []  # shoal.shared constants (negative ids): to every agent once
        self.next_origin = 1
        self.next_num = 1
        self.evicted: dict[bytes, float] = {}     # unknown peer -> when we last told it
        self.lost_agents = 0
        self._hostname = socket.gethostname()
        self._later: list[tuple[float, int]] = []  # (due, tid): retries after their backoff
        self.running = True
        self._asked_shutdown: bytes | None = None  # the client whose SHUTDOWN stops the head
        self.bad_messages = 0
        self._cancels: dict[int, list[Any]] = {}   # key -> [client, req, done, agents, t]
        self._asks: dict[int, list[Any]] = {}      # STATE: key -> [client, req, started, agents]
        self._cancel_seq = 0
        self._out_tasks: dict[bytes, list[Any]] = defaultdict(list)
        self._out_results: dict[bytes, list[Any]] = defaultdict(list)

    # ---- loop ---------------------------------------------------------------------
    def serve(self) -> None:
        sock = self.sock
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        next_beat = time.monotonic() + self.heartbeat_s
        recv = sock.recv_multipart
        later = self._later
        try:
            while self.running:
                wait = self.heartbeat_s
                if later:
                    wait = max(0.0, min(wait, later[0][0] - time.monotonic()))
                if self._expect_until:
                    wait = max(0.0, min(wait, self._expect_until - time.monotonic()))
                if self.tracer is not None:  # trace: packed records wait for their write
                    wait = max(0.0, min(wait, self.tracer.due() - time.monotonic()))
                # whole milliseconds, rounded up: pyzmq truncates, and a sub-millisecond
                # wait (a retry's backoff, the trace's write) would spin the loop
                if poller.poll(math.ceil(wait * 1000)):
                    for _ in range(10000):
                        try:
                            frames = recv(zmq.NOBLOCK, copy=True)
                        except zmq.Again:
                            break
                        self._handle(frames)
                        if not self.running or (self.core.unfilled >= TURN_TASKS
                                                and not self.core.planning):
                            break  # (a huge submission: place what is read, read on after;
                            # a planning core plans the whole of it: shoal.head.planning)
                    self._flush()
                elif self.tracer is not None:
                    self.tracer.flush()
                now = time.monotonic()
                if self._expect_until and now >= self._expect_until:
                    self._stop_waiting(f"--expect-timeout passed with {self._agent_count()} of "
                                       f"{self.expect_agents} agents")
                if later and later[0][0] <= now:
                    due = []
                    while later and later[0][0] <= now:
                        due.append(heapq.heappop(later)[1])
                    self._apply(self.core.requeue(due))
                    self._flush()
                if now >= next_beat:
                    next_beat = now + self.heartbeat_s
                    self.status.sample(now, self.core.completed)
                    self._beat(now)
        finally:
            self._stop_agents()
            if self.journal is not None:  # journal: commit the rest, note the run's end
                self.journal.close()
            if self.tracer is not None:
                self.tracer.close(self.stats())
            sock.close(linger=500)
            self.ctx.term()

    def _handle(self, frames: list[bytes]) -> None:
        if len(frames) != 3:
            self.bad_messages += 1
            log.warning("dropped a malformed message (%d frames)", len(frames))
            return
        ident, sig, body = frames
        try:
            msg = self.sessions.decode(ident, sig, body)
        except P.AuthError as exc:
            self._refused(ident, sig, exc)
            return
        except Exception as exc:  # noqa: BLE001 - garbage that was signed: still not trusted
            self.bad_messages += 1
            log.warning("dropped an undecodable message from %r: %s", ident[:32], exc)
            return
        if msg is None:  # sent before its sender had a session (nothing to check it with)
            return
        kind = msg[0]
        peer = self.peers.get(ident)
        if peer is not None:
            peer.last_seen = time.monotonic()
        elif kind != P.HELLO and kind != P.BYE:
            self._evict(ident, kind)
            return
        if kind == P.RESULTS:
            if self.tracer is not None:  # trace: before the core reuses the items
                self.tracer.results(ident, msg[1], msg[2] if len(msg) > 2 else None, body)
            failed = self.status.results(self.core, ident, msg[1])  # before the core reuses them
            self._apply(self.core.finished(ident, msg[1]))
            if failed:
                self.status.settle(self.core, failed)
        elif kind == P.SUBMIT:
            funcs = msg[2]
            if funcs:
                self.funcs.update(funcs)
                for k in funcs:  # shoal.shared: its sender has it already
                    if k < 0 and k not in peer.sent_fids:
                        peer.sent_fids.add(k)
                        self.consts.append(k)
                        for aid, other in self.peers.items():  # to every agent now (_flush)
                            if other.role == "agent":
                                self._out_tasks.setdefault(aid, [])
            specs, keys = msg[1], None
            if len(msg) > 4:  # function names: failures in `shoal status` name them
                self.status.add_names(msg[4])
            if self.journal is not None:  # journal: answer keys that finished OK before
                specs, keys = self._journal_submit(peer, specs, msg[4] if len(msg) > 4 else None)
            d = self.core.submit(specs, ident, static=bool(msg[3]), keys=keys,
                                 owner_num=peer.num if peer.role == "client" else None)
            if self.tracer is not None:  # trace: the message as it came, or the specs taken
                self.tracer.funcs(msg[4] if len(msg) > 4 else None)
                if specs is msg[1]:
                    self.tracer.submitted(specs, body, peer.num if peer.role == "client"
                                          else None)
                else:
                    self.tracer.submitted(specs)
            self._apply(d)
        elif kind == P.RETURN:
            if self.tracer is not None:
                self.tracer.closed(ident, msg[1], RETURNED, "handed back unstarted")
            self._apply(self.core.returned(ident, msg[1]))
        elif kind == P.DRAIN:
            log.info("agent %s is draining: %s", ident.decode(errors="replace"),
                     msg[1] if len(msg) > 1 else "")
            self._apply(self.core.drain(ident))
        elif kind == P.CREDIT:
            self._apply(self.core.set_window(ident, msg[1]))
        elif kind == P.HELLO:
            self._hello(ident, msg[1], msg[2])
        elif kind == P.CANCEL:
            if peer.role == "agent":
                self._agent_cancelled(ident, msg[1], msg[2])
                return
            req, tids = msg[1], msg[2]
            done, d = self.core.cancel(tids, ident)
            if self.tracer is not None:
                self.tracer.cancelled(done)
            on_agents, d.revoke = d.revoke, {}
            self._apply(d)
            for agent in list(on_agents):  # not sent yet: dropped here, never to run
                taken = self._take_unsent(agent, on_agents[agent])
                if taken:
                    if self.tracer is not None:
                        self.tracer.cancelled(taken)
                    self._apply(self.core.cancelled_on_agent(agent, taken))
                    done.extend(taken)
                    left = set(on_agents[agent]) - set(taken)
                    if left:
                        on_agents[agent] = sorted(left)
                    else:
                        del on_agents[agent]
            if not on_agents:
                self._send(ident, [P.CANCEL, req, done])
                return
            # Ask the agents holding the rest to drop them if they have not started.
            self._cancel_seq += 1
            key = self._cancel_seq
            self._cancels[key] = [ident, req, done, set(on_agents), time.monotonic()]
            queued_only = bool(len(msg) > 3 and msg[3])
            for agent, agent_tids in on_agents.items():
                self._send(agent, [P.CANCEL, key, agent_tids, queued_only])
        elif kind == P.STATE:
            self._state(ident, peer.role, msg[1], msg[2])
        elif kind == P.STATS:
            # with a detail field: what `shoal status` shows (shoal.head.status)
            self._send(ident, [P.STATS, msg[1], self.stats() if len(msg) < 3
                               else self.status.snapshot(self, msg[2])])
        elif kind == P.AGENTS:
            self._send(ident, [P.AGENTS, msg[1], self.agents()])
        elif kind == P.HEARTBEAT:
            pass
        elif kind == P.BYE:
            self._bye(ident, msg[1] if len(msg) > 1 else "left")
        elif kind == P.SHUTDOWN:
            log.info("shutdown requested by %r", ident)
            self.running = False
            # no SHUTDOWN back to it: it closes at once, and a message left for a peer
            # gone holds the head's exit for the socket's linger (1 s)
            self._asked_shutdown = ident
        else:
            log.warning("dropped a message of unknown kind %r from %r", kind, ident[:32])

    def _refused(self, ident: bytes, sig: bytes, exc: P.AuthError) -> None:
        """A message that failed authentication: counted, logged once per peer; a peer of
        an earlier head on this address (no session here) is told once to say HELLO again."""
        self.bad_messages += 1
        if self.sessions.first_complaint(ident):
            log.warning("dropped a message that failed authentication from %r: %s "
                        "(more from it are only counted)", ident[:32], exc)
        if isinstance(exc, NoSession):
            frames = self.sessions.evict_unknown(ident, sig, "this head has no session with you")
            if frames is not None:
                try:
                    self.sock.send_multipart([ident, *frames], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass

    def _hello(self, ident: bytes, role: str, info: dict[str, Any]) -> None:
        if role not in ("client", "agent"):
            log.warning("dropped HELLO with unknown role %r", role)
            return
        old = self.peers.get(ident)
        if old is not None:
            self._bye(ident, "reconnected", lost=True)
        self.evicted.pop(ident, None)
        peer = Peer(ident, role, info)
        self.peers[ident] = peer
        origin = self.next_origin
        self.next_origin += ORIGINS_PER_AGENT if role == "agent" else 1
        peer.num = self.next_num
        self.next_num += 1
        self._send(
            ident,
            [P.WELCOME, {"origin": origin, "prefetch": self.prefetch, "run_id": self.conn.run_id,
                         "slots": self.core.total_slots() + (peer.slots if role == "agent" else 0),
                         "heartbeat_s": self.heartbeat_s, "timeout_s": self.timeout_s,
                         "num": peer.num,
                         "journal": self.journal is not None,  # journal: clients send keys
                         "trace": self.tracer is not None}],  # trace: agents attach times
        )
        if self.tracer is not None:
            self.tracer.joined(ident, role, peer.num, info,
                               agent_resources(ident, info) if role == "agent" else None)
        if role == "agent":
            res = agent_resources(ident, info)
            log.info("agent %s joined with %d slots%s", ident.decode(errors="replace"), peer.slots,
                     f", {res['gpus']} GPUs" if res["gpus"] else "")
            self._apply(self.core.add_agent(ident, peer.slots, peer.num, **res))
            if self._expect_until and self._agent_count() >= self.expect_agents:
                self._stop_waiting(f"{self.expect_agents} agents joined")

    def _agent_count(self) -> int:
        return sum(1 for p in self.peers.values() if p.role == "agent")

    def _stop_waiting(self, why: str) -> None:
        """The wait for the allocation's agents is over: dispatch from now on."""
        self._expect_until = 0.0
        log.info("%s: dispatching", why)
        self._apply(self.core.resume())
        self._flush()

    def _state(self, ident: bytes, role: str, req: int, tids: list[int]) -> None:
        """STATE (``Future.running()``): which of a client's tasks have started. Those not
        dispatched (or still in this turn's TASKS) have not; the agents holding the others
        are asked, and answer at once from their workers' shared records."""
        if role == "agent":
            ask = self._asks.get(req)
            if ask is not None:
                ask[2].extend(tids)
                ask[3].discard(ident)
                if not ask[3]:
                    del self._asks[req]
                    self._send(ask[0], [P.STATE, ask[1], ask[2]])
            return
        on_agents: dict[bytes, list[int]] = {}
        for tid in tids:
            task = self.core.tasks.get(tid)
            if task is not None and task.owner == ident and task.state == DISPATCHED \
                    and task.agent is not None:
                on_agents.setdefault(task.agent, []).append(tid)
        for agent in list(on_agents):
            out = self._out_tasks.get(agent)
            if out:
                unsent = {s[P.T_ID] for s in out}
                on_agents[agent] = [t for t in on_agents[agent] if t not in unsent]
            if not on_agents[agent] or agent not in self.peers:
                del on_agents[agent]
        if not on_agents:
            self._send(ident, [P.STATE, req, []])
            return
        self._cancel_seq += 1
        key = self._cancel_seq
        self._asks[key] = [ident, req, [], set(on_agents)]
        for agent, agent_tids in on_agents.items():
            self._send(agent, [P.STATE, key, agent_tids])

    def _take_unsent(self, agent: bytes, tids: list[int]) -> list[int]:
        """Take tasks of ``tids`` out of this turn's TASKS to ``agent``: a CANCEL sent now
        would reach the agent before them."""
        out = self._out_tasks.get(agent)
        if not out:
            return []
        want = set(tids)
        taken = [s[P.T_ID] for s in out if s[P.T_ID] in want]
        if taken:
            out[:] = [s for s in out if s[P.T_ID] not in want]
        return taken

    def _agent_cancelled(self, agent: bytes, key: int, tids: list[int]) -> None:
        if self.tracer is not None and tids:
            self.tracer.closed(agent, tids, P.CANCELLED, "cancelled")
        self._apply(self.core.cancelled_on_agent(agent, tids))
        pending = self._cancels.get(key)
        if pending is None:
            return
        pending[2].extend(tids)
        pending[3].discard(agent)
        if not pending[3]:
            del self._cancels[key]
            self._send(pending[0], [P.CANCEL, pending[1], pending[2]])

    def _bye(self, ident: bytes, reason: str, lost: bool = False) -> None:
        """The peer left (BYE) or, with ``lost``, was declared lost."""
        peer = self.peers.pop(ident, None)
        if peer is None:
            return
        if lost:
            self.evicted[ident] = 0.0  # if it speaks again, it is told at once
        if peer.role == "agent":
            if lost:
                self.lost_agents += 1
            if self.tracer is not None:  # trace: before the core requeues its attempts
                state = self.core.agents.get(ident)
                self.tracer.agent_leaving(ident, reason, lost, state.running if state else (),
                                          state.holds if state else ())
            failed = self.status.agent_lost(self.core, ident, reason) if lost else None
            self._apply(self.core.remove_agent(ident, reason, lost=lost))
            if failed:
                self.status.settle(self.core, failed)
            for key in [k for k, c in self._cancels.items() if ident in c[3]]:
                self._agent_cancelled(ident, key, [])
            for key in [k for k, c in self._asks.items() if ident in c[3]]:
                self._state(ident, "agent", key, [])
        else:
            if self.tracer is not None:  # trace: before the core drops its tasks
                self.tracer.client_leaving(ident, peer.num, reason)
            self._apply(self.core.cancel_owner(ident, peer.num))
            if self.exit_when_idle and not any(p.role == "client" for p in self.peers.values()):
                self.running = False

    def _beat(self, now: float) -> None:
        if self.owner_pid is not None and not alive(self.owner_pid):
            log.info("owner process %d is gone; stopping", self.owner_pid)
            self.running = False
            return
        for ident, peer in list(self.peers.items()):
            silent = now - peer.last_seen
            pid = self._local_pid(peer)
            if pid and peer.role == "client":
                # A client on this host: its process tells more than its silence. Gone ->
                # lost at once; stopped (Ctrl-Z, a debugger) -> kept, it will speak again.
                if not alive(pid):
                    log.warning("client %s (pid %d) exited without saying goodbye",
                                ident.decode(errors="replace"), pid)
                    self._bye(ident, "its process exited", lost=True)
                    continue
                silent = 0.0
            if silent > self.timeout_s:
                log.warning("%s %s silent for %.1f s: lost", peer.role, ident.decode(errors="replace"),
                            silent)
                self._bye(ident, f"silent for {silent:.0f} s", lost=True)
            else:
                self._send(ident, [P.HEARTBEAT])
        self._flush()

    def _local_pid(self, peer: Peer) -> int:
        """The peer's pid when it runs on this host (ipc endpoints are always local)."""
        pid = peer.info.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            return 0
        if self.address.startswith("ipc://") or peer.info.get("host") == self._hostname:
            return pid
        return 0

    def _evict(self, ident: bytes, kind: int) -> None:
        """A message from a peer we do not know (declared lost, or never welcomed): tell
        it once a second, so it drops what it holds and says HELLO again."""
        now = time.monotonic()
        last = self.evicted.get(ident)
        if last is not None and now - last < EVICT_EVERY_S:
            return
        if len(self.evicted) > 100_000:  # bounded: a flood of made-up names cannot grow it
            self.evicted.clear()
        self.evicted[ident] = now
        log.info("told %s (message kind %d) it is not a member of this run",
                 ident.decode(errors="replace")[:64], kind)
        self._send(ident, [P.EVICTED, "not a member of this run (declared lost?): say HELLO again"])

    # ---- decisions -> messages ------------------------------------------------------
    def _apply(self, d: Decisions) -> None:
        if not d:
            return
        if d.later:
            now = time.monotonic()
            for delay, tid in d.later:
                heapq.heappush(self._later, (now + delay, tid))
        # revoked before this turn's new dispatches are queued: an attempt not sent yet
        # stays here, and a new attempt of the same task (MPI, agent lost) still leaves
        for agent, tids in d.revoke.items():
            taken = set(self._take_unsent(agent, tids))
            left = [t for t in tids if t not in taken] if taken else tids
            if left:
                self._send(agent, [P.CANCEL, 0, left])
        for agent, specs in d.dispatch.items():
            self._out_tasks[agent].extend(specs)
        for owner, items in d.resolve.items():
            self._out_results[owner].extend(items)
        if self.tracer is not None and d.resolve:
            self.tracer.resolved(d.resolve)
        if d.done_keys and self.journal is not None:  # journal: buffered, see _flush
            self.journal.finished(d.done_keys)

    def _flush(self) -> None:
        if self.core.unfilled:  # this turn's submissions, placed together
            self._apply(self.core.fill())
        if self.journal is not None and self.journal.pending:
            self._journal_commit()  # journal: before any result of this turn leaves
        if self._out_results:
            out, self._out_results = self._out_results, defaultdict(list)
            for owner, items in out.items():
                if owner in self.peers:
                    self._send(owner, [P.RESULTS, items])
        if self._out_tasks:
            out, self._out_tasks = self._out_tasks, defaultdict(list)
            for agent, specs in out.items():
                peer = self.peers.get(agent)
                if peer is None:
                    continue
                funcs: dict[int, bytes] = {}
                sent = peer.sent_fids
                for spec in specs:
                    if spec[T_KIND] != P.CMD:
                        fid = spec[T_FID]
                        if fid not in sent:
                            sent.add(fid)
                            funcs[fid] = self.funcs[fid]
                for c in self.consts:  # shoal.shared constants travel once per agent
                    if c not in sent:
                        sent.add(c)
                        funcs[c] = self.funcs[c]
                if self.tracer is not None:  # before the send: no agent time precedes it
                    self.tracer.dispatched(agent, specs)
                self._send(agent, [P.TASKS, specs, funcs])
        if self.tracer is not None:
            self.tracer.flush()

    # ---- journal (shoal.head.journal) -------------------------------------------------
    def _journal_submit(self, peer: Peer, specs: list[list[Any]], names: dict[int, str] | None,
                        ) -> tuple[list[list[Any]], list[str | None]]:
        """Resolve at once the keyed tasks that finished OK in an earlier run; note the
        others as submitted; return the specs the core must schedule and their keys. A
        client's tasks are keyed by the rule of :mod:`shoal.transport.keys` (``names``: its
        functions' names, sent once each); sub-tasks from agents only by a key their
        submitter gave. A task id the core never saw counts as succeeded, so dependents of
        an answered task run."""
        journal = self.journal
        assert journal is not None
        if peer.role == "client":
            counter = peer.keys
            if counter is None:
                counter = peer.keys = KeyCounter({})
            if isinstance(names, dict):
                counter.add_names(names)
            keys = counter.keys(specs)
        else:
            keys = [given_key(spec) for spec in specs]
        if not journal.resumable:  # nothing to look up: only note the keys
            journal.submitted([key for key in keys if key is not None])
            return specs, keys
        wanted = [key for key in keys if key is not None]
        if not wanted:
            return specs, keys
        try:
            found = journal.lookup(wanted)
        except JournalError as exc:
            self._journal_failed(exc)
            return specs, keys
        if found:
            out = self._out_results[peer.ident]
            kept: list[list[Any]] = []
            kept_keys: list[str | None] = []
            for spec, key in zip(specs, keys, strict=True):
                payload = found.get(key) if key is not None else None
                if payload is not None:
                    out.append([spec[P.T_ID], P.OK, payload, 0, None])
                else:
                    kept.append(spec)
                    kept_keys.append(key)
            answered = len(specs) - len(kept)
            self.from_journal += answered
            journal.answered(answered)
            specs, keys = kept, kept_keys
        journal.submitted([key for key in keys if key is not None])
        return specs, keys

    def _journal_commit(self) -> None:
        try:
            self.journal.commit()  # type: ignore[union-attr]
        except JournalError as exc:
            self._journal_failed(exc)

    def _journal_failed(self, exc: JournalError) -> None:
        # A run is worth more than its journal: go on without it (docs/journal.md).
        log.error("%s; the run goes on without the journal", exc)
        try:
            self.journal.db.close()  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - closing a broken handle: nothing to save
            pass
        self.journal = None

    def _send(self, ident: bytes, msg: list[Any]) -> None:
        try:
            self.sock.send_multipart([ident, *self.sessions.encode(ident, msg)], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            log.debug("send to %r failed: %s", ident, exc)

    def _stop_agents(self) -> None:
        for ident, _peer in list(self.peers.items()):
            if ident != self._asked_shutdown:
                self._send(ident, [P.SHUTDOWN])
        self.peers.clear()

    def agents(self) -> list[dict[str, Any]]:
        """The connected agents: name, number, host, slots, pid."""
        return [
            {"name": p.ident.decode(errors="replace"), "num": p.num, "slots": p.slots,
             "host": str(p.info.get("host", "")), "pid": int(p.info.get("pid", 0)),
             **agent_resources(p.ident, p.info)}
            for p in self.peers.values() if p.role == "agent"
        ]

    def stats(self) -> dict[str, Any]:
        core = self.core
        return {
            "agents": sum(1 for p in self.peers.values() if p.role == "agent"),
            "slots": core.total_slots(),
            "queued": core.queued(),
            "live": len(core.tasks),
            "completed": core.completed,
            "retried": core.retried,
            "requeued": core.requeued,
            "lost_agents": self.lost_agents,
            "bad_messages": self.bad_messages,
            "from_journal": self.from_journal,
        }
