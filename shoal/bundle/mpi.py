"""MPI broadcast of bundles: one receiver per node, chunked, pipelined with unpacking.

Run under an MPI launcher (``shoal bcast --transport mpi`` starts it for you):

    mpirun -npernode 1 python -m shoal.bundle.mpi --to /dev/shm/$USER/shoal B1.tar.zst B2.tar.zst

Rank 0 reads each bundle in chunks and broadcasts them with the buffer API (``Bcast``,
no pickling: 10-15x faster than ``bcast`` for 300 MB); every node leader feeds the chunks
to a thread that decompresses and extracts while the next chunk is in flight. All leaders
then agree (``allreduce``) that every node verified every checksum before any of them
switches its root, so a job never starts with a partial copy on some nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from .archive import CHUNK, BundleError, StreamUnpacker, expected_digest
from .install import cleanup, commit, discard, finalize_stage, made_parents, new_stage, remove_empty


def _dest_for(template: str, rank: int, host: str) -> Path:
    # {rank} and {host} let per-rank receivers (or a shared scratch) keep copies apart
    return Path(template.replace("{rank}", str(rank)).replace("{host}", host))


def run(argv: list[str] | None = None) -> int:
    """Entry point of each MPI rank; returns the exit status (same on every rank)."""
    ap = argparse.ArgumentParser(prog="python -m shoal.bundle.mpi")
    ap.add_argument("bundles", nargs="*", type=Path)
    ap.add_argument("--to", required=True)
    ap.add_argument("--receivers", choices=("per-node", "per-rank"), default="per-node")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--cleanup", action="store_true")
    ap.add_argument("--chunk-mb", type=float, default=CHUNK / (1 << 20))
    ap.add_argument("--buffer-mb", type=float, default=1024,
                    help="received bytes that may wait for the unpacker: the broadcast never waits on a "
                         "slow disk (or, oversubscribed, on a CPU that MPI's busy-polling takes) until this fills")
    ap.add_argument("--no-pipeline", action="store_true", help="receive everything, then unpack (for timing)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    host = socket.gethostname()
    if a.receivers == "per-node":
        node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.rank)
        leader = node.rank == 0
        node.Free()
    else:
        leader = True
    leaders = world.Split(0 if leader else MPI.UNDEFINED, world.rank)
    status = 0
    if leader:
        dest = _dest_for(a.to, world.rank, host)
        if a.cleanup:
            err = None
            made = made_parents(dest)
            try:
                cleanup(dest, parents=False)
            except OSError as exc:
                err = f"{host}: cleanup of {dest} failed: {exc}"
            # receivers sharing a parent (per-rank copies): remove made directories in rounds,
            # so the one who made a shared parent removes it after the others emptied it
            for _ in range(leaders.allreduce(len(made), op=MPI.MAX)):
                made = [d for d in made if d not in remove_empty(made)]
                leaders.Barrier()
            errs = [e for e in leaders.gather(err, root=0) or [] if e]
            status = _report(world, errs, None, a.json)
        else:
            status = _deliver(leaders, world, a, dest, host)
        leaders.Free()
    status = world.bcast(status, root=0)
    return status


def _deliver(comm, world, a: argparse.Namespace, dest: Path, host: str) -> int:
    import numpy as np
    from mpi4py import MPI

    chunk = max(1 << 16, int(a.chunk_mb * (1 << 20)))
    meta: object = None
    if comm.rank == 0:  # validate before any transfer: a receiver must never wait forever
        try:
            if not a.bundles:
                raise BundleError("no bundle files given")
            meta = []
            for p in a.bundles:
                if not p.is_file():
                    raise BundleError(f"{p}: no such bundle file")
                meta.append((p.name, p.stat().st_size, expected_digest(p)))
        except BundleError as exc:
            meta = str(exc)
    meta = comm.bcast(meta, root=0)
    if isinstance(meta, str):
        if comm.rank == 0:
            print(f"shoal bcast: {meta}", file=sys.stderr)
        return 1

    t0 = time.perf_counter()
    t_bcast = 0.0
    err: str | None = None
    stage = None
    try:
        stage = new_stage(dest, overlay=not a.fresh)
    except (BundleError, OSError) as exc:
        err = f"{host}: {exc}"
    files = [open(p, "rb") for p in a.bundles] if comm.rank == 0 else []
    nbytes = 0
    try:
        for i, (name, size, digest) in enumerate(meta):  # type: ignore[misc]
            qn = max(2, int(a.buffer_mb * (1 << 20)) // chunk)
            unp = StreamUnpacker(stage, name, qn) if stage is not None and not a.no_pipeline else None
            held: list[bytearray] = []
            off = 0
            while off < size:
                n = min(chunk, size - off)
                buf = bytearray(n)
                if comm.rank == 0:
                    if files[i].readinto(buf) != n:
                        comm.Abort(3)  # the file changed under us; nobody can finish
                tb = time.perf_counter()
                comm.Bcast([np.frombuffer(buf, dtype=np.uint8), MPI.BYTE], root=0)
                t_bcast += time.perf_counter() - tb
                if unp is not None:
                    unp.feed(buf)
                elif stage is not None:
                    held.append(buf)
                off += n
            nbytes += size
            if stage is not None and err is None:
                try:
                    if unp is None:
                        unp = StreamUnpacker(stage, name)
                        for b in held:
                            unp.feed(b)
                        held.clear()
                    unp.finish(digest)
                except BundleError as exc:
                    err = f"{host}: {exc}"
            elif unp is not None:
                try:
                    unp.finish(digest)
                except BundleError:
                    pass
        if stage is not None and err is None:
            try:
                finalize_stage(stage, dest)
            except BundleError as exc:
                err = f"{host}: {exc}"
    finally:
        for f in files:
            f.close()
    t_recv_unpacked = time.perf_counter() - t0
    # every node switches only if every node verified everything
    ok = comm.allreduce(1 if err is None else 0, op=MPI.MIN)
    if ok and stage is not None:
        commit(dest, stage)
    elif stage is not None:
        discard(stage)
    t_total = time.perf_counter() - t0
    stats = {"host": host, "rank": world.rank, "dest": str(dest), "bytes": nbytes,
             "bcast_s": t_bcast, "bcast_and_unpack_s": t_recv_unpacked,
             "unpack_tail_s": t_recv_unpacked - t_bcast, "total_s": t_total, "error": err}
    allstats = comm.gather(stats, root=0)
    errs = [s["error"] for s in allstats or [] if s["error"]]
    return _report(world, errs, allstats, a.json)


def _report(world, errs: list[str], allstats: list[dict] | None, as_json: bool) -> int:
    if world.rank != 0:
        return 0
    status = 1 if errs else 0
    for e in errs:
        print(f"shoal bcast: {e}", file=sys.stderr)
    if errs and allstats is not None:
        print("shoal bcast: nothing was switched on any node (all or none)", file=sys.stderr)
    if allstats is not None:
        summary = {
            "receivers": len(allstats), "bytes": allstats[0]["bytes"],
            "bcast_s": max(s["bcast_s"] for s in allstats),
            "bcast_and_unpack_s": max(s["bcast_and_unpack_s"] for s in allstats),
            "total_s": max(s["total_s"] for s in allstats), "ok": not errs,
        }
        if as_json:
            print(json.dumps({"summary": summary, "receivers": allstats}))
        elif not errs:
            print(f"shoal bcast: {summary['bytes'] / 1e6:.1f} MB to {summary['receivers']} receivers "
                  f"in {summary['total_s']:.2f} s (bcast {summary['bcast_s']:.2f} s)", file=sys.stderr)
    return status


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(run())
