"""Connection files: where a head listens, the run's secret and its CURVE keys (mode 0600).

    {"address": "tcp://10.0.0.5:50123",   ZeroMQ endpoint peers connect to
     "secret": "<64 hex digits>",         HMAC key of the run (at least 16 bytes)
     "run_id": "<12 hex digits>",
     "encrypt": true,                     optional (absent: false): CURVE on the head's socket
     "curve_public": "<40 Z85 chars>",    the head's CURVE public key (when encrypt)
     "curve_secret": "<40 Z85 chars>"}    the head's CURVE secret key (the head's own use)

Every field is checked when the file is read: a bad one is a :class:`ConnectionFileError`
(a ``ValueError``) whose one-line message names the file and the field.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass

MIN_SECRET_BYTES = 16
_Z85_KEY_CHARS = 40  # a 32-byte CURVE key in Z85


class ConnectionFileError(ValueError):
    """A connection file that cannot be used; the message is one line naming file and field."""


class MissingConnectionFile(ConnectionFileError, FileNotFoundError):
    """The connection file does not exist (also a ``FileNotFoundError``)."""


@dataclass
class Connection:
    """Everything a client or agent needs to join a head."""

    address: str          # ZeroMQ endpoint, e.g. tcp://10.0.0.5:50123 or ipc:///run/.../head
    secret: str           # hex; the run's HMAC key (sessions are derived from it)
    run_id: str
    encrypt: bool = False  # CURVE on the head<->peer hop
    curve_public: str = ""  # Z85; the key peers set as curve_serverkey
    curve_secret: str = ""  # Z85; the head's own

    @property
    def key(self) -> bytes:
        return bytes.fromhex(self.secret)

    @classmethod
    def new(cls, address: str, encrypt: bool = False) -> Connection:
        """A fresh run: new secret and run id, and a CURVE keypair when ``encrypt``."""
        pub = sec = ""
        if encrypt:
            import zmq

            if not zmq.has("curve"):
                raise ConnectionFileError("encryption asked for, but this libzmq has no CURVE support")
            pub_b, sec_b = zmq.curve_keypair()
            pub, sec = pub_b.decode("ascii"), sec_b.decode("ascii")
        # os.urandom is what secrets.token_hex reads (without its module's imports)
        return cls(address=address, secret=os.urandom(32).hex(), run_id=os.urandom(6).hex(),
                   encrypt=encrypt, curve_public=pub, curve_secret=sec)

    def write(self, path: str) -> None:
        """Write atomically with mode 0600 (the secret must never be world-readable)."""
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        data = asdict(self)
        if not self.encrypt:  # keep files of unencrypted runs as they always were
            for k in ("encrypt", "curve_public", "curve_secret"):
                del data[k]
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: str) -> Connection:
        """Read and check a connection file; raises :class:`ConnectionFileError`."""
        where = f"connection file {path!r}"
        try:
            with open(path, "rb") as fh:
                raw = fh.read(1 << 20)
        except FileNotFoundError:
            raise MissingConnectionFile(f"{where} does not exist") from None
        except OSError as exc:
            raise ConnectionFileError(f"{where} cannot be read: {exc.strerror or exc}") from None
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConnectionFileError(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConnectionFileError(f"{where} is not a JSON object")
        missing = {"address", "secret", "run_id"} - set(data)
        if missing:
            raise ConnectionFileError(f"{where} lacks {', '.join(sorted(missing))}")

        def bad(field: str, why: str) -> ConnectionFileError:
            return ConnectionFileError(f"{where}: field {field!r} {why}")

        address, secret, run_id = data["address"], data["secret"], data["run_id"]
        if not isinstance(address, str) or not address.startswith(("tcp://", "ipc://", "inproc://")):
            raise bad("address", f"is not a ZeroMQ endpoint (tcp://HOST:PORT or ipc://PATH): {address!r:.80}")
        if not isinstance(secret, str):
            raise bad("secret", f"is not a string of hex digits but {type(secret).__name__}")
        try:
            key = bytes.fromhex(secret)
        except ValueError:
            raise bad("secret", "is not hex") from None
        if len(key) < MIN_SECRET_BYTES:
            raise bad("secret", f"is too short ({len(key)} bytes; at least {MIN_SECRET_BYTES})")
        if not isinstance(run_id, str):
            raise bad("run_id", f"is not a string but {type(run_id).__name__}")
        encrypt = data.get("encrypt", False)
        if not isinstance(encrypt, bool):
            raise bad("encrypt", f"is not true or false: {encrypt!r:.40}")
        pub, sec = data.get("curve_public", ""), data.get("curve_secret", "")
        for field, value in (("curve_public", pub), ("curve_secret", sec)):
            if value and not _is_z85_key(value):
                raise bad(field, f"is not a CURVE key ({_Z85_KEY_CHARS} Z85 characters)")
        if encrypt:
            if not pub:
                raise bad("curve_public", "is missing (needed when 'encrypt' is true)")
            import zmq

            if not zmq.has("curve"):
                raise bad("encrypt", "is true, but this libzmq has no CURVE support")
        return cls(address=address, secret=secret, run_id=run_id, encrypt=encrypt,
                   curve_public=pub, curve_secret=sec)


def _is_z85_key(value: object) -> bool:
    if not isinstance(value, str) or len(value) != _Z85_KEY_CHARS:
        return False
    from zmq.utils import z85

    try:
        return len(z85.decode(value.encode("ascii"))) == 32
    except Exception:  # noqa: BLE001 - z85 raises KeyError, struct.error, ... on junk
        return False


# ---- where a head listens ------------------------------------------------------------------
def is_local_endpoint(endpoint: str) -> bool:
    """True for ipc://, inproc:// and TCP on a loopback address: traffic never leaves the host."""
    proto, _, rest = endpoint.partition("://")
    if proto != "tcp":
        return True
    host = rest.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    import ipaddress  # (here: ~1 ms of every cold start, for TCP heads only)

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # "*", an interface or host name: may be reachable from elsewhere
        return False


def host_address() -> tuple[str, str]:
    """The IPv4 address other hosts reach this one at, and how it was found.

    This host's name resolved, when that gives a non-loopback address; else (a name that
    maps to 127.0.x.x, as many distributions set up) the source address of the default
    route (a UDP ``connect``, which sends nothing); else loopback.
    """
    import ipaddress

    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        infos = []
    for info in infos:
        addr = str(info[4][0])
        if not ipaddress.ip_address(addr).is_loopback:
            return addr, f"host name {name!r}"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the route, sends nothing
            addr = s.getsockname()[0]
        if not ipaddress.ip_address(addr).is_loopback and addr != "0.0.0.0":
            return addr, "the default route"
    except OSError:
        pass
    return "127.0.0.1", f"loopback (host name {name!r} resolves to no other address and there is no default route)"
