"""`shoal head --plan` with a real agent process: tasks with estimates are planned over the
agent in time (shoal.head.planning) and all run, GPU tasks included; the agent starts the
planned ones in the plan's order."""

from __future__ import annotations

from shoal.transport import protocol as P

from .conftest import running_head
from .test_agent_resources import Client


def test_a_planning_head_runs_estimated_tasks_in_its_planned_order(tmp_path):
    with running_head(tmp_path, "--plan", "--prefetch", "0") as (connfile, _, add_agent):
        add_agent("--slots", "2", "--gpus", "1")
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
