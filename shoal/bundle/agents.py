"""The ``agents`` transport: deliver bundles through a running shoal runtime.

One receiver per agent (= per node; agents on one host that resolve to the same DEST
share one receiver). For each receiver the client submits tasks pinned to that agent
(``ex.options(agent=NAME, after=[...])``):

1. ``node_begin``: make DEST's parent (owner-only), a private incoming directory and a
   staging directory beside DEST (a copy of the live root unless ``fresh``);
2. ``node_append`` per chunk (8 MiB by default), each after the previous one: write the
   chunk at its offset in the incoming copy of the bundle file. At most ``window``
   chunks are in flight per receiver, so the client holds a bounded amount of memory;
3. ``node_unpack`` per bundle, after its last chunk and after the previous bundle's
   unpack: check the size, unpack into the staging directory while verifying the
   sha256 (and zstd's and tar's own checks), delete the incoming file. It runs on
   another slot of the agent while the next bundle's chunks still arrive;
4. ``node_finish``: last fixes (conda-unpack); DEST is not switched yet;
5. only when every receiver finished successfully, ``node_commit`` switches DEST on each
   with one ``rename``; otherwise ``node_discard`` removes the staging and incoming
   directories everywhere, and DEST stays as it was on every node (all or none).

The functions ``node_*`` run in the agents' workers and travel by reference, so the
workers need shoal importable (it is in every tier 2 bundle). ``DEST`` may contain
``{agent}`` and ``{host}`` to keep copies apart (several agents on one host in tests).
Every byte goes through the head once per receiver, so delivery time grows with the
number of nodes; for hundreds of nodes use ``mpi`` or ``sbcast``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .archive import CHUNK, BundleError, expected_digest, iter_file_chunks, unpack_stream
from .install import (
    _siblings_prefix,
    cleanup,
    commit,
    current_generation,
    discard,
    ensure_parent,
    finalize_stage,
    made_parents,
    new_stage,
    remove_empty,
)
from .report import DeliveryReport

WINDOW = 4  # chunks in flight per receiver


# ---- on each node (in an agent's worker) ------------------------------------------------

def _incoming(dest: Path, token: str) -> Path:
    # named like the generations, so `shoal bcast --cleanup` removes leftovers too
    return dest.parent / f"{_siblings_prefix(dest)}in-{token}"


def _stage(dest: Path, token: str) -> Path:
    return dest.parent / f"{_siblings_prefix(dest)}st-{token}"


def node_begin(dest: str, token: str, fresh: bool) -> dict[str, Any]:
    """Prepare this node to receive: DEST's parent, incoming and staging directories."""
    d = Path(dest)
    ensure_parent(d)
    current_generation(d)  # a foreign DEST fails now, before any byte travels
    _incoming(d, token).mkdir(mode=0o700)
    new_stage(d, overlay=not fresh, name=f"st-{token}")
    return {"host": socket.gethostname(), "agent_pid": os.getppid()}


def node_append(dest: str, token: str, name: str, offset: int, data: bytes) -> int:
    """Write one chunk of bundle ``name`` at ``offset``; return the size received so far."""
    path = _incoming(Path(dest), token) / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        have = os.fstat(fd).st_size
        if have < offset:
            raise BundleError(f"{name}: chunk at byte {offset} but only {have} bytes received (a chunk was lost)")
        os.pwrite(fd, data, offset)
        if have > offset + len(data):  # a chunk written again (after a retry): drop what followed
            os.ftruncate(fd, offset + len(data))
    finally:
        os.close(fd)
    return offset + len(data)


def node_unpack(dest: str, token: str, name: str, size: int, digest: str) -> float:
    """Verify and unpack one received bundle into the staging directory; return seconds."""
    d = Path(dest)
    path = _incoming(d, token) / name
    t0 = time.perf_counter()
    got = path.stat().st_size if path.exists() else 0
    if got != size:
        raise BundleError(f"{name}: {got} of {size} bytes received: truncated in transit")
    try:
        unpack_stream(iter_file_chunks(path), _stage(d, token), name, digest)
    finally:
        path.unlink(missing_ok=True)
    return time.perf_counter() - t0


def node_finish(dest: str, token: str) -> str:
    """Last fixes before the staging directory may go live; return its path."""
    d = Path(dest)
    stage = _stage(d, token)
    finalize_stage(stage, d)
    shutil.rmtree(_incoming(d, token), ignore_errors=True)
    return str(stage)


def node_commit(dest: str, stage: str) -> None:
    """Switch DEST to the prepared staging directory (one atomic rename)."""
    commit(Path(dest), Path(stage))


def node_discard(dest: str, token: str) -> None:
    """Throw away what a failed delivery left on this node; DEST is untouched."""
    shutil.rmtree(_incoming(Path(dest), token), ignore_errors=True)
    discard(_stage(Path(dest), token))


def node_cleanup(dest: str) -> list[str]:
    """``shoal bcast --cleanup`` on this node; return the parent directories shoal made
    that are not empty yet (another receiver's DEST may still be inside)."""
    d = Path(dest)
    made = made_parents(d)
    cleanup(d, parents=False)
    gone = remove_empty(made)
    return [str(p) for p in made if p not in gone and p.is_dir()]


def node_remove_empty(dirs: list[str]) -> list[str]:
    """Another cleanup round for parents shared between receivers; return what is left."""
    made = [Path(x) for x in dirs]
    gone = remove_empty(made)
    return [str(p) for p in made if p not in gone and p.is_dir()]


# ---- in the client ---------------------------------------------------------------------

@dataclass
class _Receiver:
    agent: str
    host: str
    dest: str
    last: Future | None = None          # the data chain: begin, then chunks in order
    last_unpack: Future | None = None   # the unpack chain: one per bundle, in order
    inflight: deque = field(default_factory=deque)   # data chain futures not yet settled
    unpacks: deque = field(default_factory=deque)    # unpack futures not yet settled
    error: str | None = None
    stage: str | None = None
    unpack_s: float = 0.0
    started: bool = False

    @property
    def where(self) -> str:
        return f"{self.host} (agent {self.agent})"


def dest_for(template: str, agent: str, host: str) -> str:
    """DEST on one node: ``{agent}`` and ``{host}`` replaced, made absolute."""
    return os.path.abspath(template.replace("{agent}", agent).replace("{host}", host))


def receivers(ex: Any, dest: str, agents: Sequence[str] | None = None) -> tuple[list[_Receiver], list[dict]]:
    """One receiver per distinct (host, DEST) among the connected agents (or ``agents``)."""
    infos = ex.agents()
    if agents is not None:
        known = {a.name for a in infos}
        missing = [a for a in agents if a not in known]
        if missing:
            raise BundleError(f"transport 'agents': no connected agent named {', '.join(missing)}")
        infos = [a for a in infos if a.name in set(agents)]
    if not infos:
        raise BundleError("transport 'agents': no agents are connected to the head")
    seen: dict[tuple[str, str], str] = {}
    out, shared = [], []
    for a in infos:
        d = dest_for(dest, a.name, a.host)
        key = (a.host, d)
        if key in seen:  # another agent on this node already receives for this DEST
            shared.append({"agent": a.name, "host": a.host, "dest": d, "via": seen[key]})
            continue
        seen[key] = a.name
        out.append(_Receiver(a.name, a.host, d))
    return out, shared


def _settle(r: _Receiver, fut: Future) -> Any:
    """The future's result; the receiver's first error (the oldest failing task of its
    chain, i.e. the cause: later ones only fail on their dependency) is kept."""
    try:
        return fut.result()
    except BaseException as exc:  # noqa: BLE001 - a remote failure of any type names the node
        if r.error is None:
            r.error = f"{r.where}: {_describe(exc)}"
        return None


def _describe(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    if name in ("BundleError",):
        return msg
    if name == "TaskLost":
        return f"agent lost during delivery ({msg})" if msg else "agent lost during delivery"
    return f"{name}: {msg}" if msg else name


def deliver_via_agents(
    ex: Any,
    bundle_paths: Sequence[Path | str],
    dest: Path | str,
    *,
    fresh: bool = False,
    chunk_size: int = CHUNK,
    window: int = WINDOW,
    agents: Sequence[str] | None = None,
    pipeline: bool = True,
) -> Any:
    """Deliver bundles to ``dest`` on every agent of executor ``ex``; all nodes switch or none.

    ``pipeline``: unpack each bundle as soon as it has arrived, while the next is sent
    (False: unpack only after everything arrived). ``agents``: only these receive.

    Returns a ``DeliveryReport`` whose ``status`` is 0 when every node installed, 1 when
    any failed (``errors`` names each node and what went wrong; no node switched then).
    """
    t0 = time.perf_counter()
    paths = [Path(os.path.abspath(p)) for p in bundle_paths]
    items = []
    for p in paths:
        if not p.is_file():
            raise BundleError(f"{p}: no such bundle file")
        items.append((p.name, p.stat().st_size, expected_digest(p)))
    if len({name for name, _, _ in items}) != len(items):
        raise BundleError("two bundles with the same file name")
    recv, shared = receivers(ex, str(dest), agents)
    token = secrets.token_hex(6)
    chunk_size = max(1 << 16, int(chunk_size))
    window = max(1, int(window))

    def submit(r: _Receiver, after: list[Future | None], fn: Any, *args: Any) -> Future:
        return ex.options(agent=r.agent, after=[f for f in after if f is not None]).submit(fn, *args)

    def settle_data(r: _Receiver, keep: int) -> None:
        while len(r.inflight) > keep:
            _settle(r, r.inflight.popleft())

    def check_unpacks(r: _Receiver) -> None:  # stop sending to a node as soon as it failed
        while r.unpacks and r.unpacks[0].done():
            r.unpack_s += _settle(r, r.unpacks.popleft()) or 0.0

    def unpack_now(name: str, size: int, digest: str) -> None:
        for r in recv:  # after the bundle's last chunk: on another slot while later chunks arrive
            if r.error is None:
                r.last_unpack = submit(r, [r.last_unpack, r.last], node_unpack, r.dest, token, name, size, digest)
                r.unpacks.append(r.last_unpack)

    for r in recv:
        r.last = r.last_unpack = submit(r, [], node_begin, r.dest, token, fresh)
        r.inflight.append(r.last)
        r.started = True
    t_send = time.perf_counter()
    for (name, size, digest), p in zip(items, paths, strict=True):
        offset = 0
        for data in iter_file_chunks(p, chunk_size):
            live = [r for r in recv if r.error is None]
            if not live:
                break
            for r in live:
                settle_data(r, window - 1)
                check_unpacks(r)
                if r.error is None:
                    r.last = submit(r, [r.last], node_append, r.dest, token, name, offset, data)
                    r.inflight.append(r.last)
            offset += len(data)
        if offset != size:
            for r in recv:
                settle_data(r, 0)
                while r.unpacks:
                    _settle(r, r.unpacks.popleft())
            _abort(ex, recv, token)
            raise BundleError(f"{p}: changed while it was being sent ({offset} of {size} bytes)")
        if pipeline:
            unpack_now(name, size, digest)
    if not pipeline:
        for name, size, digest in items:
            unpack_now(name, size, digest)
    finish = {r.agent: submit(r, [r.last_unpack], node_finish, r.dest, token) for r in recv if r.error is None}
    send_s = time.perf_counter() - t_send
    for r in recv:  # in chain order, so the first error kept is the cause
        settle_data(r, 0)
        while r.unpacks:
            r.unpack_s += _settle(r, r.unpacks.popleft()) or 0.0
        if r.agent in finish:
            r.stage = _settle(r, finish[r.agent])
    errors = [r.error for r in recv if r.error]
    if errors:
        _abort(ex, recv, token)
        errors.append("nothing was switched on any node (all or none)")
    else:
        switched = [(r, ex.options(agent=r.agent).submit(node_commit, r.dest, r.stage)) for r in recv]
        for r, fut in switched:
            _settle(r, fut)
        bad = [r for r in recv if r.error]
        errors = [r.error for r in bad]
        if bad:
            errors.append(f"DEST was switched on {len(recv) - len(bad)} of {len(recv)} nodes; "
                          "the others failed at the final rename")
    total = sum(size for _, size, _ in items)
    nodes = [{"agent": r.agent, "host": r.host, "dest": r.dest, "ok": r.error is None, "error": r.error,
              "unpack_s": r.unpack_s} for r in recv]
    nodes += [{**s, "ok": not errors, "error": None, "shared": True} for s in shared]
    return DeliveryReport("agents", time.perf_counter() - t0, 1 if errors else 0, errors=errors,
                          nodes=nodes, nbytes=total, send_s=send_s)


def _abort(ex: Any, recv: list[_Receiver], token: str) -> None:
    """Remove staging and incoming directories on every node still reachable."""
    futs = []
    for r in recv:
        if r.started:
            try:
                futs.append(ex.options(agent=r.agent).submit(node_discard, r.dest, token))
            except Exception:  # noqa: BLE001 - the executor itself is gone: nothing to reach
                pass
    for f in futs:
        try:
            f.result(timeout=60)
        except BaseException:  # noqa: BLE001 - a lost agent keeps its leftovers; cleanup removes them
            pass


def cleanup_via_agents(ex: Any, dest: Path | str, agents: Sequence[str] | None = None) -> Any:
    """Remove DEST (generations, staging, made parents) on every agent's node."""
    t0 = time.perf_counter()
    recv, _ = receivers(ex, str(dest), agents)
    futs = [(r, ex.options(agent=r.agent).submit(node_cleanup, r.dest)) for r in recv]
    left = {r.agent: _settle(r, f) or [] for r, f in futs}
    # receivers whose DESTs share a parent shoal made ({agent} in DEST): whoever made it
    # removes it once the others have emptied it, in rounds (as the MPI transport does)
    while any(left.values()):
        futs = [(r, ex.options(agent=r.agent).submit(node_remove_empty, left[r.agent]))
                for r in recv if left.get(r.agent)]
        now = {r.agent: _settle(r, f) or [] for r, f in futs}
        if sum(map(len, now.values())) >= sum(map(len, left.values())):
            break  # no progress: someone else's files are in there; leave them
        left = now
    errors = [r.error for r in recv if r.error]
    nodes = [{"agent": r.agent, "host": r.host, "dest": r.dest, "ok": r.error is None, "error": r.error}
             for r in recv]
    return DeliveryReport("agents", time.perf_counter() - t0, 1 if errors else 0, errors=errors, nodes=nodes)
