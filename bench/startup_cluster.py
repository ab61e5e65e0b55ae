"""Start-up inside an allocation: from `python -m shoal prog.py` to the first result from
every node, against `srun` of the same plain program (and Parsl, when importable).

    SLURM_CONF=/tmp/shoal-slurm/slurm.conf python bench/startup_cluster.py [--reps 5] [--nodes 4]

Everything runs inside one `salloc -N NODES --exclusive` (the allocation's own wait is not
counted): each rep times, from this side, one `python -m shoal prog.py` whose program
submits one task to each node's agent and stops at the result from the last node, and one
`srun -N NODES --ntasks-per-node=1 python -c ...` printing each node's name. Prints one
line per variant: min / median / max seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHOAL_PROG = """\
import os, sys, time
from shoal import as_completed, futures

def where():
    return os.environ.get("SLURMD_NODENAME")

ex = futures._executor()  # returns once every node's agent joined
seen = set()
# one task pinned to each agent (short tasks left free would all run on the first agent)
for f in as_completed([ex.options(agent=a.name).submit(where) for a in ex.agents()]):
    seen.add(f.result())
print("ALL" if len(seen) == int(sys.argv[1]) else "MISSING", time.time(), flush=True)
"""

PLAIN = "import os, time; print(os.environ.get('SLURMD_NODENAME'), time.time(), flush=True)"

PARSL_PROG = """\
import os, sys, time
import parsl
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.launchers import SrunLauncher
from parsl.providers import LocalProvider

n = int(sys.argv[1])
cfg = Config(executors=[HighThroughputExecutor(
    label="htex", max_workers_per_node=4, address="127.0.0.1",
    provider=LocalProvider(nodes_per_block=n, init_blocks=1, max_blocks=1,
                           launcher=SrunLauncher(overrides="--overlap")))])

@parsl.python_app
def where():
    import os
    return os.environ.get("SLURMD_NODENAME")

with parsl.load(cfg):
    seen = set()
    futs = [where() for _ in range(4 * n)]
    from concurrent.futures import as_completed
    for f in as_completed(futs):
        seen.add(f.result())
        if len(seen) == n:
            print("ALL", time.time(), flush=True)
            break
"""

INNER = """\
import json, os, subprocess, sys, time
reps, nodes, py, parsl_py, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
out = {"shoal": [], "srun": [], "parsl": []}

def until_all(cmd, parse, env=None):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=d, timeout=300, env=env)
    t = parse(r.stdout)
    if t is None:
        sys.stderr.write(f"{cmd[0]}: rc {r.returncode}\\n{r.stdout}\\n{r.stderr}\\n")
        return None
    return t - t0

def last_all(s):
    return next((float(l.split()[1]) for l in s.splitlines() if l.startswith("ALL")), None)

def plain(s):
    rows = [l.split() for l in s.splitlines() if len(l.split()) == 2]
    return max(float(r[1]) for r in rows) if len({r[0] for r in rows}) == nodes else None

for _ in range(reps):
    out["shoal"].append(until_all([py, "-m", "shoal", "prog.py", str(nodes)], last_all))
    out["srun"].append(until_all(["srun", f"-N{nodes}", "--ntasks-per-node=1", py, "-c",
                                  PLAIN_CMD], plain))
    if parsl_py:
        # Parsl starts its interchange and worker pools as scripts found on PATH
        env = {**os.environ, "PATH": os.path.dirname(parsl_py) + ":" + os.environ["PATH"]}
        out["parsl"].append(until_all([parsl_py, "parsl_prog.py", str(nodes)], last_all, env))
print("RESULT", json.dumps(out))
""".replace("PLAIN_CMD", repr(PLAIN))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--parsl-python", default="", help="an interpreter with parsl installed")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="shoal-startup-")
    with open(os.path.join(d, "prog.py"), "w") as fh:
        fh.write(SHOAL_PROG)
    with open(os.path.join(d, "parsl_prog.py"), "w") as fh:
        fh.write(PARSL_PROG)
    with open(os.path.join(d, "inner.py"), "w") as fh:
        fh.write(textwrap.dedent(INNER))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    try:
        r = subprocess.run(["salloc", "-N", str(args.nodes), "--exclusive", "-t", "10",
                            sys.executable, os.path.join(d, "inner.py"), str(args.reps),
                            str(args.nodes), sys.executable, args.parsl_python, d],
                           capture_output=True, text=True, env=env, timeout=3600)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        print(r.stdout, r.stderr, file=sys.stderr)
        return 1
    if r.stderr.strip():
        print("\n".join(ln for ln in r.stderr.splitlines() if not ln.startswith("salloc:")),
              file=sys.stderr)
    res = json.loads(line[len("RESULT "):])
    load = os.getloadavg()[0]
    print(f"start-up to the first result from all {args.nodes} nodes, inside salloc -N "
          f"{args.nodes} --exclusive ({args.reps} reps, load {load:.1f}):")
    for name, label in (("shoal", "python -m shoal prog.py (head + 1 agent/node via srun)"),
                        ("srun", f"srun -N{args.nodes} --ntasks-per-node=1 python -c ..."),
                        ("parsl", "Parsl HTEX + LocalProvider + SrunLauncher")):
        ts = [t for t in res[name] if t is not None]
        if not res[name]:
            continue
        if not ts:
            print(f"  {label:58s} failed")
            continue
        print(f"  {label:58s} min {min(ts):.2f} s  median {statistics.median(ts):.2f} s  "
              f"max {max(ts):.2f} s" + (f"  ({len(res[name]) - len(ts)} failed)"
                                        if len(ts) < len(res[name]) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
