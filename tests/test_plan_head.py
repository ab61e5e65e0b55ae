"""`shoal head --plan` with a real agent process: tasks with estimates are planned over the
agent in time (shoal.head.planning) and all run, GPU tasks included; the agent starts the
planned ones in the plan's order."""

from __future__ import annotations

import subprocess
import time

from shoal.transport import protocol as P

from .conftest import PY, stop_procs
from .test_agent_resources import Client


def test_a_planning_head_runs_estimated_tasks_in_its_planned_order(tmp_path):
    connfile = tmp_path / "run.json"
    head = subprocess.Popen([PY, "-m", "shoal", "head", "--bind", "tcp://127.0.0.1:0",
                             "--connection-file", str(connfile), "--plan", "--prefetch", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [head]
    try:
        deadline = time.monotonic() + 30
        while not connfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        procs.append(subprocess.Popen([PY, "-m", "shoal", "agent", "--connect", str(connfile),
                                       "--slots", "2", "--gpus", "1"],
                                      stderr=subprocess.PIPE, text=True))
        c = Client(connfile)
        try:
            # one agent of 2 cores and 1 GPU; the plan (horizon 1.2 s): c (0.9 s) and the GPU
            # task b (0.6 s) at 0, d (0.6 s) when b ends, a (0.3 s) when c ends
            log = tmp_path / "log"
            specs = [c.cmd(f"echo {name} >> {log}; sleep {est}", opts={"estimate": est, **extra})
                     for name, est, extra in (("a", 0.3, {}), ("b", 0.6, {"gpus": 1}),
                                              ("c", 0.9, {}), ("d", 0.6, {}))]
            items = c.run(specs, timeout=60)
        finally:
            c.close()
        assert [i[1] for i in items] == [P.OK] * 4
        names = log.read_text().split()
        assert sorted(names[:2]) == ["b", "c"] and names[2:] == ["d", "a"]
    finally:
        stop_procs(procs)
