"""Security of the head<->peer hop: replay, wrong keys, bind address, CURVE, bad connection files.

Real heads, agents and clients; the attacker is a raw ZeroMQ socket (or a TCP proxy) in the
test that has recorded what a real client sent but does not hold the run's secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from shoal import Command, Executor
from shoal.client.executor import ExecutorError
from shoal.task.codec import Encoder
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection, ConnectionFileError
from shoal.transport.session import PeerSession, secure_client

from .conftest import PY, ROOT

ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


# ---- helpers ---------------------------------------------------------------------------------
class Cluster:
    """A `shoal head` on loopback TCP and agents, all stopped (by PID) at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.connfile = tmp / "run.json"
        self.head: subprocess.Popen | None = None

    def start_head(self, *args: str) -> subprocess.Popen:
        if self.connfile.exists():
            self.connfile.unlink()
        self.head = self._spawn([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                                 "--connection-file", str(self.connfile), *args])
        deadline = time.monotonic() + 30
        while not self.connfile.exists() and time.monotonic() < deadline:
            assert self.head.poll() is None, self.head.stderr.read()
            time.sleep(0.05)
        return self.head

    def add_agent(self, connfile: Path | None = None, slots: int = 1) -> subprocess.Popen:
        return self._spawn([PY, "-m", "shoal", "agent", "--connect", str(connfile or self.connfile),
                            "--slots", str(slots), "--workers", "0"])

    def _spawn(self, argv: list[str]) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=ROOT, env={**ENV, "TMPDIR": str(self.tmp)})
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen) -> str:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        return err

    def close(self) -> None:
        for p in reversed(self.procs):
            self.stop(p)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


class Relay:
    """A ZeroMQ relay between clients and the head that records what clients send.

    Front: a ROUTER clients connect to; back: one DEALER per client with the client's own
    identity, so the head sees the client as if it were connected directly.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.recorded: list[tuple[bytes, list[bytes]]] = []
        self.address = ""
        self._ready = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        ctx = zmq.Context()
        front = ctx.socket(zmq.ROUTER)
        port = front.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        backs: dict[bytes, zmq.Socket] = {}
        owner: dict[zmq.Socket, bytes] = {}
        poller = zmq.Poller()
        poller.register(front, zmq.POLLIN)
        self._ready.set()
        while not self._stop:
            for sock, _ in poller.poll(50):
                frames = sock.recv_multipart()
                if sock is front:
                    ident, rest = frames[0], frames[1:]
                    self.recorded.append((ident, rest))
                    back = backs.get(ident)
                    if back is None:
                        back = backs[ident] = ctx.socket(zmq.DEALER)
                        back.setsockopt(zmq.IDENTITY, ident)
                        back.connect(self.target)
                        owner[back] = ident
                        poller.register(back, zmq.POLLIN)
                    back.send_multipart(rest)
                else:
                    front.send_multipart([owner[sock], *frames])
        for s in [front, *backs.values()]:
            s.close(0)
        ctx.term()

    def close(self) -> None:
        self._stop = True
        self._thread.join(10)


def with_address(src: Path, dst: Path, address: str) -> Path:
    data = json.loads(src.read_text())
    data["address"] = address
    dst.write_text(json.dumps(data))
    dst.chmod(0o600)
    return dst


def wait_stats(connfile: Path, pred, timeout: float = 20.0) -> dict:
    with Executor(connect=str(connfile)) as ex:
        deadline = time.monotonic() + timeout
        while True:
            st = ex.stats()
            if pred(st) or time.monotonic() > deadline:
                return st
            time.sleep(0.1)


def replay(address: str, messages: list[list[bytes]], ident: bytes | None, wait: float = 1.5
           ) -> list[list[bytes]]:
    """Send recorded messages from a fresh DEALER; return whatever comes back."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    if ident is not None:
        s.setsockopt(zmq.IDENTITY, ident)
    s.connect(address)
    for frames in messages:
        s.send_multipart(frames)
    got = []
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        if s.poll(left * 1000):
            got.append(s.recv_multipart())
    s.close(0)
    ctx.term()
    return got


def answers(address: str, key: bytes, server_key: str | None) -> bool:
    """Send a valid HELLO (with the run's secret; CURVE when ``server_key``): any answer?"""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    secure_client(s, server_key)
    s.connect(address)
    s.send_multipart(PeerSession(key).encode([P.HELLO, "client", {}]))
    ok = bool(s.poll(3000))
    s.close(0)
    ctx.term()
    return ok


def side_effect_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def record_one_task(cluster: Cluster, side: Path) -> tuple[bytes, list[list[bytes]]]:
    """Run one real command task through a relay; return the client identity and its messages."""
    relay = Relay(Connection.read(str(cluster.connfile)).address)
    try:
        via = with_address(cluster.connfile, cluster.tmp / "via-relay.json", relay.address)
        with Executor(connect=str(via)) as ex:
            r = ex.submit(Command(f"echo ran >> {side}")).result(60)
            assert r.returncode == 0
        # the client's BYE leaves as its socket closes: let the relay record it first
        deadline = time.monotonic() + 5
        while len(relay.recorded) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        relay.close()  # closes its DEALERs: the client's identity is free at the head again
    assert side_effect_lines(side) == 1
    idents = {ident for ident, _ in relay.recorded}
    assert len(idents) == 1
    msgs = [frames for _, frames in relay.recorded]
    assert len(msgs) >= 3  # HELLO, SUBMIT, ..., BYE
    return idents.pop(), msgs


# ---- replay ------------------------------------------------------------------------------------
def test_replay_from_new_and_same_identity_rejected(cluster, tmp_path):
    cluster.start_head()
    cluster.add_agent()
    side = tmp_path / "side.txt"
    ident, msgs = record_one_task(cluster, side)
    signed = [m for m in msgs if m[0]]
    address = Connection.read(str(cluster.connfile)).address
    # the same bytes from a new identity, then from the client's own (it has left): the
    # only answer is one EVICTED (no session here), bound to the replayer's identity
    for who in (b"replayer-new", ident):
        got = replay(address, msgs, who)
        assert [msgpack.unpackb(body)[0] for _, body in got] == [P.EVICTED]
        with pytest.raises(P.AuthError):
            PeerSession(Connection.read(str(cluster.connfile)).key, ident=who).decode(*got[0])
    st = wait_stats(cluster.connfile, lambda s: s["bad_messages"] >= 2 * len(signed))
    assert st["bad_messages"] == 2 * len(signed)  # every one reached the head and was refused
    time.sleep(0.5)
    assert side_effect_lines(side) == 1, "a replayed task ran again"
    err = cluster.stop(cluster.head)
    assert "HELLO replayed" in err  # logged once per identity: its first message


def test_replay_to_restarted_head_rejected(cluster, tmp_path):
    """A head restarted on the same connection file has forgotten the nonces it took: the
    replayed HELLO opens a session, but one the replayer cannot sign for."""
    cluster.start_head()
    agent = cluster.add_agent()
    side = tmp_path / "side.txt"
    ident, msgs = record_one_task(cluster, side)
    cluster.stop(agent)
    cluster.stop(cluster.head)
    head2 = cluster._spawn([PY, "-m", "shoal.head", "--connection", str(cluster.connfile)])
    cluster.add_agent()
    assert wait_stats(cluster.connfile, lambda s: s["agents"] == 1)["agents"] == 1
    address = Connection.read(str(cluster.connfile)).address
    got = replay(address, msgs, b"replayer-after-restart")
    # the WELCOME to the replayed HELLO, then heartbeats: no result (bodies are readable
    # here: this head does not encrypt)
    kinds = [msgpack.unpackb(body)[0] for _, body in got]
    assert kinds[0] == P.WELCOME and set(kinds[1:]) <= {P.HEARTBEAT}, kinds
    with pytest.raises(P.AuthError):  # signed for the original client's session: useless
        PeerSession(Connection.read(str(cluster.connfile)).key).decode(*got[0])
    signed = [m for m in msgs if m[0]]
    st = wait_stats(cluster.connfile, lambda s: s["bad_messages"] >= len(signed) - 1)
    assert st["bad_messages"] == len(signed) - 1  # all but the HELLO
    time.sleep(0.5)
    assert side_effect_lines(side) == 1, "a replayed task ran again"
    assert "bad signature" in cluster.stop(head2)


def test_sequence_numbers_refuse_a_replay_within_the_session(cluster, tmp_path):
    cluster.start_head()
    cluster.add_agent()
    conn = Connection.read(str(cluster.connfile))
    side = tmp_path / "side.txt"
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.connect(conn.address)
    try:
        sess = PeerSession(conn.key)
        s.send_multipart(sess.encode([P.HELLO, "client", {"pid": os.getpid()}]))
        assert s.poll(20000)
        welcome = sess.decode(*s.recv_multipart())
        assert welcome[0] == P.WELCOME
        enc = Encoder(welcome[1]["origin"])
        spec = enc.command(Command(f"echo ran >> {side}"), [])
        frames = sess.encode([P.SUBMIT, [spec], enc.take_funcs(), 0])
        s.send_multipart(frames)
        s.send_multipart(frames)                       # the same message again
        forged = [(1 << 40).to_bytes(8, "big") + frames[0][8:], frames[1]]
        s.send_multipart(forged)                       # its sequence number raised
        results = []
        deadline = time.monotonic() + 30
        while not results and time.monotonic() < deadline:
            if s.poll(500):
                msg = sess.decode(*s.recv_multipart())
                if msg[0] == P.RESULTS:
                    results += msg[1]
        assert [r[:2] for r in results] == [[spec[0], P.OK]]
        deadline = time.monotonic() + 1.0
        while (left := deadline - time.monotonic()) > 0:
            if s.poll(left * 1000):
                assert sess.decode(*s.recv_multipart())[0] != P.RESULTS, "ran twice"
        s.send_multipart(sess.encode([P.STATS, 1]))
        assert s.poll(10000)
        stats = sess.decode(*s.recv_multipart())
        while stats[0] != P.STATS:
            assert s.poll(10000)
            stats = sess.decode(*s.recv_multipart())
        assert stats[2]["bad_messages"] == 2
    finally:
        s.close(0)
        ctx.term()
    assert side_effect_lines(side) == 1
    assert "out of sequence" in cluster.stop(cluster.head)


def recv_kind(s: zmq.Socket, sess: PeerSession, kind: int, timeout: float = 20.0) -> list:
    """The next message of ``kind`` (heartbeats and others skipped)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if s.poll(left * 1000):
            msg = sess.decode(*s.recv_multipart())
            if msg[0] == kind:
                return msg
    raise AssertionError(f"no message of kind {kind} within {timeout} s")


def test_restarted_head_tells_a_peer_of_the_old_one_once(cluster):
    """A head restarted on the same address has no session with the old head's peers: it
    answers the first message of each with EVICTED, bound to that peer (signed with the
    run secret over the peer's identity and the tag it answers), so the peer says HELLO
    again at once instead of waiting for a time-out; nobody else can use that answer."""
    cluster.start_head()
    conn = Connection.read(str(cluster.connfile))
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.IDENTITY, b"peer-of-the-old-head")
    s.setsockopt(zmq.RECONNECT_IVL, 20)
    s.connect(conn.address)
    spy = ctx.socket(zmq.DEALER)
    spy.setsockopt(zmq.IDENTITY, b"spy")
    try:
        sess = PeerSession(conn.key, ident=b"peer-of-the-old-head")
        s.send_multipart(sess.encode([P.HELLO, "client", {}]))
        recv_kind(s, sess, P.WELCOME)
        s.send_multipart(sess.encode([P.STATS, 1]))
        recv_kind(s, sess, P.STATS)
        cluster.stop(cluster.head)
        head2 = cluster._spawn([PY, "-m", "shoal.head", "--connection", str(cluster.connfile)])
        frames = sess.encode([P.HEARTBEAT])
        s.send_multipart(frames)
        assert recv_kind(s, sess, P.EVICTED)[1]
        s.send_multipart(sess.encode([P.HEARTBEAT]))  # told once: now only counted
        assert not s.poll(1000)
        # someone who saw that message sends it as its own: the answer is bound to "spy"
        spy.connect(conn.address)
        spy.send_multipart(frames)
        assert spy.poll(10000)
        answer = spy.recv_multipart()
        with pytest.raises(P.AuthError):
            sess.decode(*answer)
        s.send_multipart(sess.encode([P.HELLO, "client", {}]))  # a new session: all is well
        recv_kind(s, sess, P.WELCOME)
        s.send_multipart(sess.encode([P.STATS, 2]))
        assert recv_kind(s, sess, P.STATS)[2]["bad_messages"] == 3
    finally:
        s.close(0)
        spy.close(0)
        ctx.term()
    cluster.stop(head2)


def test_wrong_key_and_stale_hello_rejected(cluster, tmp_path):
    cluster.start_head()
    conn = Connection.read(str(cluster.connfile))
    wrong = Connection(address=conn.address, secret="ab" * 32, run_id=conn.run_id)
    wrong.write(str(tmp_path / "wrong.json"))
    with pytest.raises(ExecutorError, match="no answer"):
        Executor(connect=str(tmp_path / "wrong.json"), start_timeout=3)
    agent = cluster.add_agent(tmp_path / "wrong.json")
    # a HELLO signed with the right key but stamped 20 minutes ago (a recording, say)
    sess = PeerSession(conn.key)
    hello = sess.encode([P.HELLO, "client", {}])
    body = P._packb([P.HELLO, "client", {"nonce": b"n" * 16, "time": time.time() - 1200}])
    stale = [hmac.digest(conn.key, b"shoal-hello\0" + body, hashlib.sha256), body]
    assert replay(conn.address, [stale], None) == []
    answer = replay(conn.address, [hello], None)  # the control: a fresh one is answered
    assert answer and sess.decode(*answer[0])[0] == P.WELCOME
    st = wait_stats(cluster.connfile, lambda s: s["bad_messages"] >= 3)
    assert st["agents"] == 0 and st["bad_messages"] >= 3
    cluster.stop(agent)
    err = cluster.stop(cluster.head)
    assert "failed authentication" in err and "clocks disagree" in err


# ---- bind address and encryption (in a network namespace the test creates) ---------------------
NETNS_SCRIPT = r'''
import json, os, socket, subprocess, sys, threading, time
import zmq
from shoal import Command, Executor
from shoal.transport import protocol as P
from shoal.transport.connfile import Connection
from shoal.transport.session import PeerSession, secure_client

PY = sys.executable
tmp = sys.argv[1]
MARKER = "shoal-marker-7f3a9c"
procs = []


def spawn(*argv):
    p = subprocess.Popen([PY, "-m", "shoal", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def stop_all():
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(15)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    procs.clear()


def listening(port):
    found = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        ip, p = local.split(":")
        if int(p, 16) == port and state == "0A":
            found.append(socket.inet_ntoa(bytes.fromhex(ip)[::-1]))
    return found


class Proxy:
    """A TCP proxy that records every byte both ways."""

    def __init__(self, host, target):
        self.srv = socket.create_server((host, 0))
        self.port = self.srv.getsockname()[1]
        self.target = target
        self.data = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target)
            except OSError:  # the head is gone (the run is over)
                c.close()
                continue
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    def pump(self, a, b):
        while True:
            try:
                d = a.recv(65536)
            except OSError:
                d = b""
            if not d:
                for s in (a, b):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            with self.lock:
                self.data += d
            b.sendall(d)


def probe(address, key, server_key, curve):
    """Send a valid HELLO (the right run secret); True if anything answers."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    if curve:
        secure_client(s, server_key)
    s.connect(address)
    s.send_multipart(PeerSession(key).encode([P.HELLO, "client", {}]))
    ok = bool(s.poll(3000))
    s.close(0)
    ctx.term()
    return ok


def run(name, *head_args):
    out = {}
    cf = os.path.join(tmp, name + ".json")
    head = spawn("head", "--connection-file", cf, *head_args)
    deadline = time.monotonic() + 30
    while not os.path.exists(cf) and time.monotonic() < deadline:
        time.sleep(0.05)
    conn = Connection.read(cf)
    out["address"], out["encrypt"] = conn.address, conn.encrypt
    host, port = conn.address[len("tcp://"):].rsplit(":", 1)
    out["listening"] = listening(int(port))
    proxy = Proxy(host, (host, int(port)))
    via = os.path.join(tmp, name + "-via.json")
    data = json.load(open(cf))
    data["address"] = f"tcp://{host}:{proxy.port}"
    json.dump(data, open(via, "w"))
    spawn("agent", "--connect", via, "--slots", "1")
    with Executor(connect=cf) as ex:
        out["upper"] = ex.submit(str.upper, MARKER).result(60)
        out["echo"] = ex.submit(Command(["echo", MARKER])).result(60).stdout.decode().strip()
    with proxy.lock:
        data = bytes(proxy.data)
    out["bytes"] = len(data)
    out["plaintext_seen"] = MARKER.encode() in data or MARKER.upper().encode() in data
    if conn.encrypt:
        out["no_curve_answered"] = probe(conn.address, conn.key, None, False)
        out["wrong_server_key_answered"] = probe(conn.address, conn.key,
                                                 zmq.curve_keypair()[0].decode(), True)
        out["right_key_answered"] = probe(conn.address, conn.key, conn.curve_public, True)
    stop_all()
    proxy.srv.close()
    out["head_stdout"] = head.stdout.read()
    return out


try:
    print(json.dumps({"default": run("default"), "plain": run("plain", "--no-encrypt")}))
finally:
    stop_all()
'''

NS_ADDR = "10.213.7.1"


@pytest.fixture
def netns():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and ip(8) to make a network namespace")
    name = f"shoal-sec-{os.getpid()}"
    setup = [["netns", "add", name], ["-n", name, "link", "set", "lo", "up"],
             ["-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
             ["-n", name, "addr", "add", f"{NS_ADDR}/24", "dev", "v0"],
             ["-n", name, "link", "set", "v0", "up"], ["-n", name, "link", "set", "v1", "up"],
             ["-n", name, "route", "add", "default", "dev", "v0"]]
    try:
        for cmd in setup:
            r = subprocess.run(["ip", *cmd], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot set up a network namespace: ip {' '.join(cmd)}: {r.stderr.strip()}")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_default_bind_and_curve_in_a_network_namespace(netns, tmp_path):
    """`shoal head` with no --bind listens on this host's address (here the namespace's only
    non-loopback one, found through its default route since the host name maps to
    127.0.0.1), not on every interface, and encrypts: a proxy between agent and head sees no
    task argument, result or output, and a peer without the server key gets nothing."""
    script = tmp_path / "ns.py"
    script.write_text(NETNS_SCRIPT)
    r = subprocess.run(["ip", "netns", "exec", netns, PY, str(script), str(tmp_path)],
                       capture_output=True, text=True, timeout=240, cwd=ROOT,
                       env={**ENV, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    d, p = out["default"], out["plain"]
    assert d["address"].startswith(f"tcp://{NS_ADDR}:")
    assert d["listening"] == [NS_ADDR]                   # not 0.0.0.0
    assert d["encrypt"] is True and "(encrypted)" in d["head_stdout"]
    assert d["upper"] == "SHOAL-MARKER-7F3A9C" and d["echo"] == "shoal-marker-7f3a9c"
    assert d["bytes"] > 1000 and not d["plaintext_seen"]
    assert d["no_curve_answered"] is False
    assert d["wrong_server_key_answered"] is False
    assert d["right_key_answered"] is True               # the probe itself works
    # the control: without encryption the same proxy does see the marker
    assert p["encrypt"] is False and p["plaintext_seen"] and p["listening"] == [NS_ADDR]


def test_loopback_and_ipc_are_not_encrypted_by_default(cluster):
    cluster.start_head()
    data = json.loads(cluster.connfile.read_text())
    assert data["address"].startswith("tcp://127.0.0.1:") and "encrypt" not in data
    with Executor() as ex:  # the local default: ipc in a 0700 directory, no CURVE
        conn = ex._cluster.connection
        assert conn.address.startswith("ipc://") and not conn.encrypt
        assert os.stat(os.path.dirname(conn.address[len("ipc://"):])).st_mode & 0o777 == 0o700
        assert ex.submit(pow, 3, 3).result(60) == 27


def test_encrypt_forced_on_loopback(cluster):
    cluster.start_head("--encrypt")
    conn = Connection.read(str(cluster.connfile))
    assert conn.encrypt and len(conn.curve_public) == 40 and len(conn.curve_secret) == 40
    cluster.add_agent()
    with Executor(connect=str(cluster.connfile)) as ex:
        assert ex.submit(pow, 2, 5).result(60) == 32
    assert not answers(conn.address, conn.key, None)           # no CURVE: no session
    assert answers(conn.address, conn.key, conn.curve_public)  # the control


# ---- bad connection files ---------------------------------------------------------------------
GOOD = {"address": "tcp://127.0.0.1:1", "secret": "ab" * 32, "run_id": "r1"}
BAD_FILES = {
    "missing": (None, "does not exist"),
    "json": ("{not json", "is not valid JSON"),
    "object": ("[1, 2]", "is not a JSON object"),
    "field": (json.dumps({"address": "tcp://127.0.0.1:1"}), "lacks run_id, secret"),
    "hex": (json.dumps({**GOOD, "secret": "zz" * 32}), "field 'secret' is not hex"),
    "short": (json.dumps({**GOOD, "secret": "ab" * 4}), "field 'secret' is too short"),
    "type": (json.dumps({**GOOD, "secret": 12}), "field 'secret' is not a string"),
    "address": (json.dumps({**GOOD, "address": "10.0.0.1:5"}), "field 'address' is not a ZeroMQ"),
    "curve": (json.dumps({**GOOD, "encrypt": True, "curve_public": "short"}),
              "field 'curve_public' is not a CURVE key"),
    "nokey": (json.dumps({**GOOD, "encrypt": True}), "field 'curve_public' is missing"),
    "flag": (json.dumps({**GOOD, "encrypt": "yes"}), "field 'encrypt' is not true or false"),
}


def write_bad(tmp_path: Path, case: str) -> Path:
    text, _ = BAD_FILES[case]
    path = tmp_path / f"{case}.json"
    if text is not None:
        path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_connection_file_executor(tmp_path, case):
    path = write_bad(tmp_path, case)
    with pytest.raises(ValueError) as info:
        Executor(connect=str(path))
    msg = str(info.value)
    assert isinstance(info.value, ConnectionFileError)
    assert BAD_FILES[case][1] in msg and str(path) in msg and "\n" not in msg


@pytest.mark.parametrize("case", ["json", "hex", "short", "curve", "missing"])
def test_bad_connection_file_command_lines(tmp_path, case):
    path = write_bad(tmp_path, case)
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("echo hi\n")
    prog = tmp_path / "prog.py"
    prog.write_text("print('hi')\n")
    runs = {
        "shoal agent": [PY, "-m", "shoal", "agent", "--connect", str(path)],
        "python -m shoal.agent": [PY, "-m", "shoal.agent", "--connection", str(path)],
        "python -m shoal.head": [PY, "-m", "shoal.head", "--connection", str(path)],
        "shoal run": [PY, "-m", "shoal", "run", "--connect", str(path), str(tasks)],
        "python -m shoal": [PY, "-m", "shoal", "--connect", str(path), str(prog)],
    }
    for what, argv in runs.items():
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=ENV)
        assert r.returncode == 2, (what, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, (what, r.stderr)
        assert BAD_FILES[case][1] in lines[0] and str(path) in lines[0], (what, lines[0])


def test_secret_too_short_for_a_session():
    with pytest.raises(ValueError, match="at least 16 bytes"):
        PeerSession(b"short")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
