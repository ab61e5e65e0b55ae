"""What runs once on each node for the ``sbcast`` transport and end-of-job cleanup:

    python -m shoal.bundle.node prepare --to DEST --dir DIR
    python -m shoal.bundle.node unpack --to DEST [--fresh] [--remove-inputs] FILE --sha256=HEX ...
    python -m shoal.bundle.node cleanup --to DEST
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
from pathlib import Path

from .archive import BundleError
from .install import cleanup, ensure_parent, unpack_bundles


def main(argv: list[str] | None = None) -> int:
    """Run one node-local step; prints a one-line error naming the host on failure."""
    ap = argparse.ArgumentParser(prog="python -m shoal.bundle.node")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--to", required=True, type=Path)
    p.add_argument("--dir", required=True, type=Path)
    u = sub.add_parser("unpack")
    u.add_argument("--to", required=True, type=Path)
    u.add_argument("--fresh", action="store_true")
    u.add_argument("--remove-inputs", action="store_true")
    u.add_argument("items", nargs="+", help="FILE --sha256=HEX pairs")
    c = sub.add_parser("cleanup")
    c.add_argument("--to", required=True, type=Path)
    a, rest = ap.parse_known_args(argv)
    host = socket.gethostname()
    try:
        if a.cmd == "prepare":
            ensure_parent(Path(os.path.abspath(a.to)))  # recorded, so cleanup removes it
            os.makedirs(a.dir, mode=0o700, exist_ok=True)
        elif a.cmd == "cleanup":
            cleanup(a.to)
        else:
            items = list(a.items) + rest
            files = [Path(x) for x in items if not x.startswith("--sha256=")]
            digests = [x.split("=", 1)[1] for x in items if x.startswith("--sha256=")]
            try:
                unpack_bundles(files, a.to, overlay=not a.fresh, digests=digests)
            finally:
                if a.remove_inputs:
                    shutil.rmtree(files[0].parent, ignore_errors=True)
    except (BundleError, OSError) as exc:
        print(f"shoal bcast: {host}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
