"""File-system syscalls touching the shared prefix during `import numpy`, before and after
rerouting, with 0/10/50 extra PYTHONPATH entries (python-mpi-bcast, Figure 1).

    nice python bench/bundle/strace_counts.py [--import "import numpy"]

"Shared" means the interpreter's own prefixes (venv and base) and the PYTHONPATH entries:
what sits on the shared file system of a cluster. After rerouting it must be 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import bundles_of_this_venv, local_dir, remove, save, unpack

from shoal.bundle import python_executable, rerouted_environ


def count(cmd: list[str], env: dict, shared: list[str], local: str | None, cwd: str) -> dict:
    with tempfile.NamedTemporaryFile(prefix="shoal-strace-", suffix=".txt") as t:
        subprocess.run(
            ["strace", "-f", "-qq", "-e", "trace=%file", "-o", t.name, *cmd],
            env=env,
            cwd=cwd,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        lines = [
            ln
            for ln in Path(t.name).read_text().splitlines()
            if "+++" not in ln and "---" not in ln
        ]
    return {
        "total": len(lines),
        "shared": sum(any(f'"{p}' in ln for p in shared) for ln in lines),
        "local": sum(f'"{local}' in ln for ln in lines) if local else 0,
        "failed": sum(" = -1 " in ln for ln in lines),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--import", dest="imp", default="import numpy")
    a = ap.parse_args()
    if shutil.which("strace") is None:
        sys.exit("strace not installed: run scripts/setup-bundle-deps.sh")
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-strace-"))
    shm = local_dir("strace")
    try:
        root = unpack(bundles_of_this_venv(work), shm / "shoal")
        pp_dirs = [work / "pythonpath" / f"d{i}" for i in range(50)]
        for d in pp_dirs:
            d.mkdir(parents=True)
        shared = sorted(
            {
                sys.prefix,
                sys.base_prefix,
                os.path.realpath(sys.prefix),
                os.path.realpath(sys.base_prefix),
                str(work / "pythonpath"),
            }
        )
        rows = []
        for n in (0, 10, 50):
            base = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
            if n:
                base["PYTHONPATH"] = os.pathsep.join(map(str, pp_dirs[:n]))
            before = count([sys.executable, "-c", a.imp], base, shared, None, str(work))
            after = count(
                [str(python_executable(root)), "-c", a.imp],
                rerouted_environ(root, base=base),
                shared,
                str(root),
                str(work),
            )
            rows.append({"pythonpath_entries": n, "before": before, "after": after})
        print(
            f"`{a.imp}`, Python {sys.version.split()[0]}; file syscalls (strace -f -e trace=%file)\n"
        )
        print(
            "| PYTHONPATH entries | before: total | before: on shared prefix + PYTHONPATH "
            "| after: total | after: on shared prefix + PYTHONPATH | after: on local copy |"
        )
        print("|---|---|---|---|---|---|")
        for r in rows:
            b, f = r["before"], r["after"]
            print(
                f"| {r['pythonpath_entries']} | {b['total']} | {b['shared']} | {f['total']} | {f['shared']} "
                f"| {f['local']} |"
            )
        save("strace", {"import": a.imp, "rows": rows})
        bad = [r for r in rows if r["after"]["shared"]]
        if bad:
            sys.exit(f"rerouting left {bad[0]['after']['shared']} syscalls on the shared prefix")
    finally:
        remove(work, shm)


if __name__ == "__main__":
    main()
