"""What the job sandbox of `shoal serve` costs: a job in the sandbox vs the same run outside.

Times, alternating, on fresh copies of the inputs each run:

* ``python -m shoal script --strict -j 2 ipcc_like.sh`` in a directory holding the inputs;
* ``shoal.service.sandbox.run_job`` of the same script (``Limits(workers=2)``), the inputs
  uploaded into the job's ``work`` (bubblewrap, job user, seccomp, cgroups, monitor);
* ``run_sandboxed(["/bin/true"])``: the sandbox's own start and end.

The workflow is bench/script/ipcc_like.sh (119 NCO commands) over 19 synthetic models of the
small size (tas(120, 64, 128), 3.9 MB each); the two runs' results must be equal (ncdump,
history/NCO attributes ignored). Prints medians. Needs root, bubblewrap and NCO.

    python bench/sandbox_bench.py [--repeat 3] [--models 19]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench" / "script"))
sys.path.insert(0, str(REPO))

from bench_nco import generate  # noqa: E402

from shoal.service.sandbox import Limits, check, run_job, run_sandboxed  # noqa: E402
from tests.script.script_helpers import ncdump_normal  # noqa: E402

SCRIPT = REPO / "bench" / "script" / "ipcc_like.sh"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", type=int, default=19)
    a = ap.parse_args()
    problems = check()
    if problems:
        sys.exit("sandbox_bench: " + "; ".join(problems))
    root = Path(tempfile.mkdtemp(prefix="shoal-sandbox-bench-"))
    try:
        inputs = root / "inputs"
        generate(str(inputs), a.models, 120, 64, 128)
        (inputs / "skel.nc").unlink(missing_ok=True)
        data = root / "data"
        data.mkdir()
        times: dict[str, list[float]] = {"direct": [], "sandbox": [], "true": []}
        outs: dict[str, Path] = {}
        for i in range(a.repeat):
            for kind in times:
                d = root / f"{kind}{i}"
                work = d / "work"
                shutil.copytree(inputs, work)
                t0 = time.perf_counter()
                if kind == "direct":
                    r = subprocess.run([sys.executable, "-m", "shoal", "script", "--strict",
                                        "-j", "2", str(SCRIPT)], cwd=work, capture_output=True,
                                       text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
                    ok = r.returncode == 0
                elif kind == "sandbox":
                    res = run_job(SCRIPT, [], job_dir=d, data_dir=data, limits=Limits(),
                                  log=d / "log")
                    ok = res.returncode == 0 and res.reason is None
                else:
                    res = run_sandboxed(["/bin/true"], job_dir=d, data_dir=data,
                                        limits=Limits(), log=d / "log")
                    ok = res.returncode == 0
                times[kind].append(time.perf_counter() - t0)
                if not ok:
                    sys.exit(f"sandbox_bench: {kind} run {i} failed")
                outs[kind] = work
        for name in ("biases.nc", "ens_anmfld.nc"):
            a_, b_ = ncdump_normal(outs["direct"] / name), ncdump_normal(outs["sandbox"] / name)
            if a_ != b_:
                sys.exit(f"sandbox_bench: {name} differs between the runs")
        load = os.getloadavg()[0]
        for kind, label in (("direct", "shoal script --strict -j 2 (no sandbox)"),
                            ("sandbox", "run_job (sandbox, workers=2)"),
                            ("true", "run_sandboxed(['/bin/true'])")):
            v = times[kind]
            print(f"{label:42s} median {statistics.median(v):6.2f} s   runs "
                  + " ".join(f"{x:.2f}" for x in v))
        m = statistics.median
        print(f"sandbox / direct: {m(times['sandbox']) / m(times['direct']):.2f}x "
              f"({a.models} models, load average {load:.1f}; results equal)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
