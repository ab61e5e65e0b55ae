"""Connection files: where a head listens and the run's secret, readable by the owner only."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass


@dataclass
class Connection:
    """Everything a client or agent needs to join a head."""

    address: str          # ZeroMQ endpoint, e.g. tcp://10.0.0.5:50123 or ipc:///run/.../head
    secret: str           # hex; HMAC key of every message of this run
    run_id: str

    @property
    def key(self) -> bytes:
        return bytes.fromhex(self.secret)

    @classmethod
    def new(cls, address: str) -> Connection:
        return cls(address=address, secret=secrets.token_hex(32), run_id=secrets.token_hex(6))

    def write(self, path: str) -> None:
        """Write atomically with mode 0600 (the secret must never be world-readable)."""
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(self), fh)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: str) -> Connection:
        try:
            with open(path) as fh:
                data = json.load(fh)
        except FileNotFoundError:
            raise FileNotFoundError(f"connection file {path!r} does not exist") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"connection file {path!r} is not valid JSON: {exc}") from None
        missing = {"address", "secret", "run_id"} - set(data)
        if missing:
            raise ValueError(f"connection file {path!r} lacks {', '.join(sorted(missing))}")
        return cls(address=data["address"], secret=data["secret"], run_id=data["run_id"])
