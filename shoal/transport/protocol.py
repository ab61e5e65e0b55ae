"""Wire protocol: msgpack envelopes, HMAC-authenticated, many tasks per message.

Every message on every hop is two ZeroMQ frames (after any ROUTER identity frame):
``[signature, body]`` where ``body = msgpack([kind, *fields])`` and
``signature = HMAC-SHA256(secret, body)``. A message whose signature does not verify
is dropped and logged by the receiver before anything in it is decoded, so pickled
payloads are only ever unpickled from authenticated peers.

Task tuples (positions, to keep envelopes small and fast):
    TASK = [tid, kind, fid, payload, deps, cores, hint]
      tid      int   unique per run: (origin << 32) | sequence
      kind     int   PY (one call), CHUNK (a map chunk), CMD (a command)
      fid      int   function id (PY/CHUNK) - functions travel once per peer, see FUNCS
      payload  bytes pickled (args, kwargs) / list of args tuples / msgpacked command spec
      deps     list  tids that must succeed first ([] for none)
      cores    int   cores the task occupies
      hint     int   static schedule: slot index the task is pinned to (-1: any)
      place    [agent, hard]  optional 8th field: run on that agent (hard) or prefer it
    RESULT = [tid, status, payload, extra]
      status   OK, ERR (payload: pickled exception + traceback), CANCELLED, DEPFAIL
      extra    set by the head: the number of the agent that ran the task (see AGENTS)
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
WELCOME = 2        # head -> peer: [WELCOME, info]            origin, slots, ...
SUBMIT = 3         # client/agent -> head: [SUBMIT, tasks, funcs]
TASKS = 4          # head -> agent / agent -> worker: [TASKS, tasks, funcs]
RESULTS = 5        # back along the path: [RESULTS, results]
CREDIT = 6         # agent -> head / worker -> agent: [CREDIT, n, blocked_delta]
CANCEL = 7         # client -> head -> agent: [CANCEL, tids]
BYE = 8            # orderly leave: [BYE, reason]
SHUTDOWN = 9       # head -> agents, agent -> workers: stop now
HEARTBEAT = 10     # liveness both ways: [HEARTBEAT]
STATS = 11         # client -> head: [STATS] / head -> client: [STATS, info]
AGENTS = 12        # client -> head: [AGENTS, req] / head -> client: [AGENTS, req, [info...]]

# ---- task kinds and result statuses ---------------------------------------------
PY = 0
CHUNK = 1
CMD = 2

OK = 0
ERR = 1
CANCELLED = 2
DEPFAIL = 3
LOST = 4           # the worker running it died (os._exit, segfault, killed)

_packb = msgpack.Packer(use_bin_type=True).pack


class AuthError(Exception):
    """A message did not carry a valid signature for this run's secret."""


class Codec:
    """Signs and verifies envelopes with one run's secret."""

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
