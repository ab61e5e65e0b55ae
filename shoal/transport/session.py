"""Sessions on the head<->peer hop: a handshake per connection, a sequence number under
every signature, and CURVE encryption of the sockets when the run asks for it.

Handshake (both messages signed with the run secret, each in its own domain):

    HELLO   peer -> head   tag = HMAC(secret, "shoal-hello\\0" || body)
            its info carries "nonce" (16 fresh random bytes) and "time" (the peer's clock)
    WELCOME head -> peer   tag = HMAC(secret, "shoal-welcome\\0" || nonce_peer || body)
            its info carries "nonce" (16 fresh random bytes of the head)

The head takes a HELLO at most once (nonces seen in the last 2 x HELLO_WINDOW_S are
refused) and only when stamped within HELLO_WINDOW_S of its own clock: a recorded HELLO
replayed gets no answer. Both ends then derive one key per direction,

    base  = HMAC(secret, "shoal-session\\0" || nonce_peer || nonce_head)
    k_p2h = HMAC(base, "peer->head")        k_h2p = HMAC(base, "head->peer")

and every later message is ``[tag, body]`` with ``tag = seq || HMAC(k_dir, seq || body)``,
``seq`` 8 bytes big-endian, strictly increasing per direction from 1 (gaps allowed: ZeroMQ
may drop messages across a reconnect, never reorder them). A receiver drops, before it
decodes anything, a message whose MAC does not verify, whose seq is not above the last one
it took, or that belongs to another session (another connection, or an older HELLO of the
same one; the head keeps one session per identity, replaced by each HELLO it takes). So a
recorded exchange replayed, from a new identity or the same one, reaches nothing, even a
head restarted since (whose nonce cache is empty): a HELLO it takes opens a session the
replayer cannot sign for. An empty tag means the sender had no session to sign with (a
heartbeat or BYE a peer sends between its HELLO and the WELCOME): dropped without a word.

A head that has no session for an identity (it restarted on the same address and a peer
of the old one goes on talking) answers it once with EVICTED, which it cannot sign with a
session key; it signs with the run secret, bound to the peer's identity and to the tag of
the message it answers: ``tag = "U" || seq || HMAC(secret, "shoal-unknown\0" || their_tag
|| len(ident) || ident || body)``. The peer takes it only for a tag it sent recently in
its current session, so it can be neither forged nor replayed to another peer.

The cost is one HMAC per (batched) message, as before, plus an 8-byte sequence number.

Encryption: ZeroMQ CURVE on the head's ROUTER (the connection file says whether, and holds
the head's keypair); peers connect with an ephemeral keypair of their own. CURVE gives
confidentiality; authentication stays with the signatures above, so no ZAP handler is
needed (libzmq then accepts any client key).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
import time
from collections import OrderedDict
from typing import Any

import msgpack
import zmq

from shoal.transport import protocol as P

HELLO_WINDOW_S = 300.0      # a HELLO stamped further from the head's clock is refused
NONCE_BYTES = 16
SESSION_IDLE_S = 3600.0     # a session silent this long (peers heartbeat every second) is forgotten
_PRUNE_EVERY_S = 60.0
_MAX_COMPLAINTS = 4096      # identities remembered for "logged once per peer"

_UNKNOWN_CTX = b"shoal-unknown\0"
_HELLO_CTX = b"shoal-hello\0"
_WELCOME_CTX = b"shoal-welcome\0"
_SESSION_CTX = b"shoal-session\0"
_P2H = b"peer->head"
_H2P = b"head->peer"
_MAC_LEN = 32
_TAG_LEN = 8 + _MAC_LEN
_UNKNOWN_TAG_LEN = 1 + _TAG_LEN
_SENT_KEPT = 256            # tags a peer remembers, to check an "unknown session" EVICTED
_NO_SESSION = [b"", b""]
_sha256 = hashlib.sha256
_seq = struct.Struct(">Q")
_packb = msgpack.Packer(use_bin_type=True).pack


def _unpackb(body: bytes) -> Any:
    return msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=True)


class NoSession(P.AuthError):
    """A session message from an identity the head has no session with."""


def _unknown_mac(secret: bytes, their_tag: bytes, ident: bytes, body: bytes) -> bytes:
    return hmac.digest(secret, _UNKNOWN_CTX + their_tag + len(ident).to_bytes(2, "big") + ident
                       + body, _sha256)


def _check_secret(secret: bytes) -> None:
    if len(secret) < 16:
        raise ValueError("run secret must be at least 16 bytes")


def _direction_macs(secret: bytes, nonce_peer: bytes, nonce_head: bytes) -> tuple[Any, Any]:
    """Keyed MAC templates (copied per message) for peer->head and head->peer."""
    base = hmac.digest(secret, _SESSION_CTX + nonce_peer + nonce_head, _sha256)
    return (hmac.new(hmac.digest(base, _P2H, _sha256), digestmod=_sha256),
            hmac.new(hmac.digest(base, _H2P, _sha256), digestmod=_sha256))


def _seal(mac: Any, seq: int, body: bytes) -> list[bytes]:
    s = _seq.pack(seq)
    h = mac.copy()
    h.update(s)
    h.update(body)
    return [s + h.digest(), body]


def _verify(mac: Any, last: int, tag: bytes, body: bytes) -> int:
    """The message's sequence number, if it is signed by ``mac`` and comes after ``last``."""
    if len(tag) != _TAG_LEN:
        raise P.AuthError("malformed signature")
    seq = _seq.unpack_from(tag)[0]
    h = mac.copy()
    h.update(tag[:8])
    h.update(body)
    if not hmac.compare_digest(h.digest(), tag[8:]):
        raise P.AuthError("bad signature (wrong key, or another session's message)")
    if seq <= last:
        raise P.AuthError(f"out of sequence ({seq} after {last}): replayed")
    return seq


class PeerSession:
    """A client's or agent's end of its session with the head (one per DEALER socket).

    ``encode([HELLO, role, info])`` starts a new session (a fresh nonce; any earlier one
    ends); ``decode`` of the head's WELCOME completes it. Until then other messages go
    out unsigned-and-empty (the head ignores them) and nothing from the head is taken
    but that WELCOME. Used by one thread at a time.
    """

    __slots__ = ("_secret", "_nonce", "_tx", "_rx", "_tx_seq", "_rx_seq", "_sent", "ident")

    def __init__(self, secret: bytes, ident: bytes | None = None) -> None:
        """``ident``: the socket's ZeroMQ identity, when set: needed to take the EVICTED of a
        head that has no session with us (it restarted); without it that is ignored."""
        _check_secret(secret)
        self._secret = secret
        self.ident = ident
        self._sent: dict[int, bytes] = {}   # seq -> tag of the last _SENT_KEPT messages
        self._nonce = b""
        self._tx: Any = None
        self._rx: Any = None
        self._tx_seq = 0
        self._rx_seq = 0

    @property
    def ready(self) -> bool:
        """True once the head's WELCOME to the latest HELLO arrived."""
        return self._rx is not None

    def encode(self, msg: list[Any]) -> list[bytes]:
        tx = self._tx
        if tx is not None and msg[0] != P.HELLO:
            seq = self._tx_seq = self._tx_seq + 1
            frames = _seal(tx, seq, _packb(msg))
            sent = self._sent
            sent[seq] = frames[0]
            sent.pop(seq - _SENT_KEPT, None)
            return frames
        if msg[0] == P.HELLO:
            return self._hello(msg)
        return _NO_SESSION

    def _hello(self, msg: list[Any]) -> list[bytes]:
        self._nonce = secrets.token_bytes(NONCE_BYTES)
        self._tx = self._rx = None
        self._tx_seq = self._rx_seq = 0
        self._sent.clear()
        info = dict(msg[2]) if len(msg) > 2 and msg[2] else {}
        info["nonce"] = self._nonce
        info["time"] = time.time()
        body = _packb([msg[0], msg[1], info, *msg[3:]])
        return [hmac.digest(self._secret, _HELLO_CTX + body, _sha256), body]

    def decode(self, tag: bytes, body: bytes) -> list[Any]:
        """Verify then decode; raises AuthError without looking inside a bad message."""
        rx = self._rx
        if rx is not None:
            if len(tag) == _UNKNOWN_TAG_LEN:
                return self._unknown(tag, body)
            self._rx_seq = _verify(rx, self._rx_seq, tag, body)
            return _unpackb(body)
        if not self._nonce or len(tag) != _MAC_LEN:
            raise P.AuthError("no session yet (waiting for WELCOME)")
        want = hmac.digest(self._secret, _WELCOME_CTX + self._nonce + body, _sha256)
        if not hmac.compare_digest(want, tag):
            raise P.AuthError("bad signature on WELCOME (wrong key, or an answer to another HELLO)")
        msg = _unpackb(body)
        nonce_head = msg[1].get("nonce") if msg[0] == P.WELCOME and isinstance(msg[1], dict) else None
        if not isinstance(nonce_head, bytes) or len(nonce_head) != NONCE_BYTES:
            raise P.AuthError("WELCOME without the head's nonce")
        self._tx, self._rx = _direction_macs(self._secret, self._nonce, nonce_head)
        return msg


    def _unknown(self, tag: bytes, body: bytes) -> list[Any]:
        """The EVICTED of a head that has no session with us, answering a message we sent."""
        sent = self._sent.get(_seq.unpack_from(tag, 1)[0]) if tag[:1] == b"U" else None
        if sent is None or self.ident is None:
            raise P.AuthError("an 'unknown session' answer to no message of this session")
        if not hmac.compare_digest(_unknown_mac(self._secret, sent, self.ident, body), tag[9:]):
            raise P.AuthError("bad signature on an 'unknown session' answer")
        msg = _unpackb(body)
        if msg[0] != P.EVICTED:
            raise P.AuthError("an 'unknown session' answer that is not EVICTED")
        return msg


class _HeadSide:
    __slots__ = ("nonce_peer", "nonce_head", "rx", "tx", "rx_seq", "tx_seq", "seen")

    def __init__(self, secret: bytes, nonce_peer: bytes, now: float) -> None:
        self.nonce_peer = nonce_peer
        self.nonce_head = secrets.token_bytes(NONCE_BYTES)
        self.rx, self.tx = _direction_macs(secret, nonce_peer, self.nonce_head)
        self.rx_seq = self.tx_seq = 0
        self.seen = now


class HeadSessions:
    """The head's end of every peer's session, by ZeroMQ identity.

    ``decode(ident, tag, body)`` returns the message, or None for an empty-tagged one
    (sent before its sender had a session), or raises AuthError; a HELLO it takes opens
    (or replaces) the identity's session and comes back without its "nonce" and "time".
    ``encode(ident, msg)`` signs for that identity's session; a WELCOME gets the head's
    nonce added to its info. A BYE ends the session once decoded.
    """

    def __init__(self, secret: bytes, window_s: float = HELLO_WINDOW_S) -> None:
        _check_secret(secret)
        self._secret = secret
        self.window_s = window_s
        self._by_ident: dict[bytes, _HeadSide] = {}
        self._nonces: OrderedDict[bytes, float] = OrderedDict()   # nonce -> when taken (monotonic)
        self._complained: set[bytes] = set()
        self._told_unknown: set[bytes] = set()
        self._pruned = time.monotonic()

    def __len__(self) -> int:
        return len(self._by_ident)

    def decode(self, ident: bytes, tag: bytes, body: bytes) -> list[Any] | None:
        s = self._by_ident.get(ident)
        if s is not None and len(tag) == _TAG_LEN:
            s.rx_seq = _verify(s.rx, s.rx_seq, tag, body)
            s.seen = time.monotonic()
            msg = _unpackb(body)
            if msg[0] == P.BYE:
                del self._by_ident[ident]
            return msg
        if len(tag) == _MAC_LEN:
            return self._hello(ident, tag, body)
        if not tag:
            return None
        if s is None:
            raise NoSession("no session for this peer (no HELLO taken from it)")
        raise P.AuthError("malformed signature")

    def _hello(self, ident: bytes, tag: bytes, body: bytes) -> list[Any]:
        want = hmac.digest(self._secret, _HELLO_CTX + body, _sha256)
        if not hmac.compare_digest(want, tag):
            raise P.AuthError("bad signature")
        msg = _unpackb(body)
        if not (isinstance(msg, list) and len(msg) >= 3 and msg[0] == P.HELLO
                and isinstance(msg[2], dict)):
            raise P.AuthError("signed as a HELLO but is none")
        info = msg[2]
        nonce, stamp = info.pop("nonce", None), info.pop("time", None)
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            raise P.AuthError("HELLO without a nonce (a peer older than this head?)")
        if not isinstance(stamp, (int, float)):
            raise P.AuthError("HELLO without a time stamp")
        skew = stamp - time.time()
        if abs(skew) > self.window_s:
            raise P.AuthError(f"HELLO stamped {skew:+.0f} s from this host's clock (more than "
                              f"{self.window_s:.0f} s): replayed, or the clocks disagree")
        now = time.monotonic()
        nonces = self._nonces
        while nonces:  # oldest first; kept for twice the window (covers skew either way)
            first = next(iter(nonces.values()))
            if now - first <= 2 * self.window_s:
                break
            nonces.popitem(last=False)
        if nonce in nonces:
            raise P.AuthError("HELLO replayed (its nonce was taken before)")
        nonces[nonce] = now
        self._by_ident[ident] = _HeadSide(self._secret, nonce, now)
        self._told_unknown.discard(ident)
        if now - self._pruned > _PRUNE_EVERY_S:
            self._pruned = now
            for old in [i for i, x in self._by_ident.items() if now - x.seen > SESSION_IDLE_S]:
                del self._by_ident[old]
        return msg

    def encode(self, ident: bytes, msg: list[Any]) -> list[bytes]:
        s = self._by_ident.get(ident)
        if s is None:
            return _NO_SESSION
        if msg[0] == P.WELCOME:
            msg[1]["nonce"] = s.nonce_head
            body = _packb(msg)
            return [hmac.digest(self._secret, _WELCOME_CTX + s.nonce_peer + body, _sha256), body]
        s.tx_seq += 1
        return _seal(s.tx, s.tx_seq, _packb(msg))

    def evict_unknown(self, ident: bytes, their_tag: bytes, reason: str) -> list[bytes] | None:
        """Frames of an EVICTED for a peer that sent ``their_tag`` under a session this head
        does not have (see the module docstring); None after the first one to ``ident``
        (until it says HELLO again) or for a tag that is not a session tag."""
        if len(their_tag) != _TAG_LEN or ident in self._told_unknown:
            return None
        if len(self._told_unknown) >= _MAX_COMPLAINTS:
            self._told_unknown.clear()
        self._told_unknown.add(ident)
        body = _packb([P.EVICTED, reason])
        return [b"U" + their_tag[:8] + _unknown_mac(self._secret, their_tag, ident, body), body]

    def forget(self, ident: bytes) -> None:
        """End an identity's session (it left); later messages under it are refused."""
        self._by_ident.pop(ident, None)

    def first_complaint(self, ident: bytes) -> bool:
        """True the first time a bad message comes from ``ident`` (log it once per peer)."""
        if ident in self._complained:
            return False
        if len(self._complained) >= _MAX_COMPLAINTS:
            self._complained.clear()
        self._complained.add(ident)
        return True


# ---- encryption ----------------------------------------------------------------------------
def secure_server(sock: zmq.Socket, conn: Any) -> None:
    """Make the head's socket a CURVE server when the connection asks for encryption
    (call before ``bind``); no-op otherwise."""
    if not getattr(conn, "encrypt", False):
        return
    if not conn.curve_secret:
        from shoal.transport.connfile import ConnectionFileError

        raise ConnectionFileError("the connection file asks for encryption but holds no 'curve_secret' "
                         "(only the head's own file has it)")
    sock.curve_secretkey = conn.curve_secret.encode("ascii")
    sock.curve_publickey = conn.curve_public.encode("ascii")
    sock.curve_server = True


def secure_client(sock: zmq.Socket, server_key: str | None) -> None:
    """Make a peer's socket a CURVE client of the head whose public key is ``server_key``
    (an ephemeral keypair of its own; call before ``connect``); no-op when None or empty."""
    if not server_key:
        return
    public, secret = zmq.curve_keypair()
    sock.curve_serverkey = server_key.encode("ascii")
    sock.curve_publickey = public
    sock.curve_secretkey = secret


def server_key(conn: Any) -> str | None:
    """The CURVE key peers of ``conn`` set as their server key, or None (no encryption)."""
    return conn.curve_public if getattr(conn, "encrypt", False) else None


def retry_soon(sock: zmq.Socket, address: str) -> None:
    """How often ``sock`` retries its connect to ``address`` while nothing listens there.

    The local default starts the head, the agent and the workers at once, and each peer
    often connects before the process it connects to has bound: ZeroMQ then retries after
    its reconnect interval plus a random jitter of up to the same again. An ``ipc://``
    peer is on this host and starting beside us, and a failed connect there is one cheap
    ``ENOENT``: 1 ms (10 ms cost a cold start 10-20 ms whenever the agent was ready before
    the head). A TCP peer keeps 10 ms (10-20 ms between tries to a host that may be down),
    which ZeroMQ's default of 100 ms would make a cold start of a cluster wait for."""
    sock.setsockopt(zmq.RECONNECT_IVL, 1 if address.startswith("ipc://") else 10)
