"""Wire protocol: msgpack envelopes, HMAC-authenticated, many tasks per message.

Every message on every hop is two ZeroMQ frames (after any ROUTER identity frame):
``[signature, body]`` where ``body = msgpack([kind, *fields])``. On the head<->peer hop
the signature is per connection (shoal.transport.session): HELLO and WELCOME carry fresh
nonces and are signed with the run secret; every later message is signed with a session
key derived from both nonces, over a per-direction sequence number and the body, and that
hop is CURVE-encrypted when the connection file says so (by default across hosts). On the
agent<->worker hop (an ipc socket in the agent's private directory) ``signature =
HMAC-SHA256(secret, body)`` (:class:`Codec`). A message whose signature does not verify
is dropped and logged by the receiver before anything in it is decoded, so pickled
payloads are only ever unpickled from authenticated peers.

Task tuples (positions, to keep envelopes small and fast):
    TASK = [tid, kind, fid, payload, deps, cores, hint, place, opts, attempt, owner]
      tid      int   unique per run: (origin << 32) | sequence
      kind     int   PY (one call), CHUNK (a map chunk), CMD (a command)
      fid      int   function id (PY/CHUNK) - functions travel once per peer, see FUNCS
      payload  bytes pickled (args, kwargs) / list of args tuples / msgpacked command spec
      deps     list  tids that must succeed first ([] for none)
      cores    int   cores the task occupies
      hint     int   static schedule: slot index the task is pinned to (-1: any)
      place    None | [agent, hard]: run on that agent (hard) or prefer it
      opts     None | dict, every key optional (absent: the default):
                 "retries"  int    extra attempts after a failed one (see RETRY rules below)
                 "retry_on" [str]  only exceptions of these classes ("module.QualName",
                                   matched against the raised class's MRO) are retried
                 "timeout"  float  seconds one attempt may run before it is killed
                 "key"      str    journal identity of the task (see head.journal)
      attempt  int   set by the head when it dispatches: 1, 2, ... (absent before)
      owner    int   set by the head when it dispatches: number of the client the task
                     (or the root of its tree) belongs to; an agent stamps it on the
                     sub-tasks its workers submit, so a tree keeps its client
    Submitters may send a shorter list (fields from ``place`` on may be left out); the
    head pads it to the full length. On the agent -> worker hop one more field follows:
      seq      int   the task's place in the stream of tasks sent to that worker (1, 2, ...):
                     what a cancel of a task queued in the worker is decided by (agent.pool)

    RESULT (worker -> agent -> head) = [tid, status, payload, attempt, info]
      status   OK, ERR (payload: pickled exception + traceback), CANCELLED, DEPFAIL,
               LOST (the process running it died), TIMEOUT (killed at its time limit)
      attempt  the attempt number of the dispatched spec it ran (the agent sets it)
      info     None, or for a failure {"why": one line, "types": ["module.QualName", ...]}
               (the raised exception's MRO, for "retry_on"; the head never unpickles)
    RESULT (head -> client) = [tid, status, payload, agent, attempts]
      agent    the number of the agent that ran the final attempt (see AGENTS), or 0
      attempts None, or one line per failed attempt ("attempt 1 on agent-x: ...") when
               a task was retried or its final outcome came after lost attempts

Liveness (see docs/failures.md): every peer sends HEARTBEAT when it sent nothing else
for ``heartbeat_s``; a peer silent for ``timeout_s`` is lost. WELCOME tells both values.
The head answers any message from an agent it declared lost (or never welcomed) with
EVICTED once; the agent then drops every task it holds (kills what runs) and sends
HELLO again, as a new agent. Results are taken only from the agent that holds the
task's current attempt, with that attempt number: nothing stale reaches a caller.

Retry rules (head): a failed attempt (ERR, LOST, TIMEOUT) is run again while attempts
<= retries (with backoff); ERR only when "retry_on" is absent or matches. LOST attempts
are also retried while the task's crash count (LOST in a row) is below the crash limit
(default 3), even with retries = 0.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any

import msgpack

log = logging.getLogger("shoal.transport")

# ---- message kinds -------------------------------------------------------------
HELLO = 1          # peer -> head: [HELLO, role, info]        role: "client" | "agent"
                   #   (info also carries the session's "nonce" and "time", see session)
WELCOME = 2        # head -> peer: [WELCOME, info]            origin, slots, ..., "nonce"
SUBMIT = 3         # client/agent -> head: [SUBMIT, tasks, funcs]
TASKS = 4          # head -> agent / agent -> worker: [TASKS, tasks, funcs]
RESULTS = 5        # back along the path: [RESULTS, results]
CREDIT = 6         # agent -> head / worker -> agent: [CREDIT, n, blocked_delta]
CANCEL = 7         # client -> head: [CANCEL, req, tids, queued_only]; head -> agent:
                   #   [CANCEL, key, tids, queued_only] (0 key: the owner is gone, stop them);
                   #   without queued_only running tasks are stopped too
BYE = 8            # orderly leave: [BYE, reason]
SHUTDOWN = 9       # head -> agents, agent -> workers: stop now
HEARTBEAT = 10     # liveness both ways: [HEARTBEAT]
STATS = 11         # client -> head: [STATS, req] / head -> client: [STATS, req, info];
                   #   [STATS, req, detail]: info adds what `shoal status` shows
                   #   (detail: {"agents": bool, "failures": n}; shoal.head.status)
AGENTS = 12        # client -> head: [AGENTS, req] / head -> client: [AGENTS, req, [info...]]
EVICTED = 13       # head -> agent: [EVICTED, reason] you were declared lost: drop all, HELLO again
RETURN = 14        # agent -> head: [RETURN, tids] handed back unstarted (draining): requeue,
                   #   the attempt does not count
DRAIN = 15         # agent -> head: [DRAIN, reason] leaving: send nothing more (then RETURN,
                   #   RESULTS of what still runs, BYE)
STATE = 16         # client -> head: [STATE, req, tids]; head -> agent: [STATE, key, tids];
                   #   answers [STATE, req|key, started]: which of the tids have started
                   #   (Future.running(): asked only when called, never sent per task)

# ---- task kinds and result statuses ---------------------------------------------
PY = 0
CHUNK = 1
CMD = 2

OK = 0
ERR = 1
CANCELLED = 2
DEPFAIL = 3
LOST = 4           # the worker running it died (os._exit, segfault, killed)
TIMEOUT = 5        # killed at its time limit

# positions in TASK and RESULT tuples
T_ID, T_KIND, T_FID, T_PAYLOAD, T_DEPS, T_CORES, T_HINT, T_PLACE, T_OPTS, T_ATTEMPT, T_OWNER = range(11)
TASK_LEN = 11
T_SEQ = 11  # agent -> worker only
T_LAUNCH = 12  # agent -> worker, traced only: when the agent sent it (its time.monotonic())
R_ID, R_STATUS, R_PAYLOAD, R_ATTEMPT, R_INFO = range(5)

_packb = msgpack.Packer(use_bin_type=True).pack


class AuthError(Exception):
    """A message did not carry a valid signature for this run's secret."""


class Codec:
    """Signs and verifies envelopes with one run's secret (the agent<->worker hop; the
    head<->peer hop uses shoal.transport.session, which adds nonces and sequence numbers)."""

    __slots__ = ("_key", "_digest")

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("run secret must be at least 16 bytes")
        self._key = secret
        self._digest = hashlib.sha256

    def sign(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, self._digest).digest()

    def encode(self, msg: list[Any]) -> list[bytes]:
        body = _packb(msg)
        return [hmac.new(self._key, body, self._digest).digest(), body]

    def decode(self, sig: bytes, body: bytes) -> list[Any]:
        """Verify then decode; raises AuthError without looking inside a bad message."""
        if not hmac.compare_digest(hmac.new(self._key, body, self._digest).digest(), sig):
            raise AuthError("bad signature")
        return msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True)


def describe_peer(ident: bytes | None) -> str:
    return ident.decode(errors="replace") if ident else "peer"
