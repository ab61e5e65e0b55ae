"""What a delivery of bundles to the nodes reports, whichever transport carried it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DeliveryReport:
    """Which transport ran, how long it took, and its exit status (0 = every node ok).

    The agents transport also fills ``errors`` (one line per failed node, naming it),
    ``nodes`` (per receiver: agent, host, dest, ok, error, unpack_s), ``nbytes`` and
    ``send_s`` (time until the last chunk was handed to the runtime)."""

    transport: str
    seconds: float
    status: int = 0
    errors: list[str] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    nbytes: int = 0
    send_s: float = 0.0
