"""Client loss: kill -9 of a client in connect mode while its 1,000 tasks are queued."""

from __future__ import annotations

import time

from . import tasks
from .harness import Ledger, pid_alive, wait_for

TIMEOUT = 2.0
SLACK = 3.0


def test_dead_clients_tasks_are_dropped_and_its_worker_freed(make_cluster, tmp_path):
    c = make_cluster(heartbeat_timeout=TIMEOUT)
    c.start_head()
    c.agent("cl", slots=2)
    ex_b = c.executor()
    c.wait_agents(ex_b, 1)
    marker = str(tmp_path / "spin.txt")
    ledger_a = Ledger(str(tmp_path / "a.txt"))
    a = c.client_script("a", f"""
import time
import shoal
from tests.failures import tasks
ex = shoal.Executor(connect=CONNFILE)
ex.submit(tasks.spin, {marker!r})                      # endless, holds one worker
futs = [ex.submit(tasks.record_start, i, {str(ledger_a)!r}, 0.2) for i in range(1000)]
print("submitted", flush=True)
time.sleep(600)
""")
    wait_for(lambda: Ledger(marker).lines() and len(ledger_a.lines()) >= 2, 60,
             what="client a's endless task and its first tasks running")
    spinner = int(Ledger(marker).lines()[0].split()[0])
    t_kill = time.time()
    a.kill()
    # client b: two tasks, both must start within the timeout, side by side (so the dead
    # client's endless task no longer holds its worker)
    ledger_b = Ledger(str(tmp_path / "b.txt"))
    futs = [ex_b.submit(tasks.record_start, i, str(ledger_b), 1.5) for i in range(2)]
    try:
        starts = sorted(t for _, _, t in (f.result(timeout=TIMEOUT + SLACK + 10) for f in futs))
    except TimeoutError:
        raise AssertionError(f"client b's tasks never ran after client a died; head: "
                             f"{ex_b.stats()}") from None
    assert starts[-1] - t_kill <= TIMEOUT + SLACK, \
        f"client b's tasks started {starts[-1] - t_kill:.1f} s after client a died"
    assert starts[-1] - starts[0] < 1.5, "b's tasks did not run side by side: a slot is held"
    wait_for(lambda: not pid_alive(spinner), 10, what="the dead client's endless task to stop")
    late = [ln for ln in ledger_a.lines() if float(ln.split()[2]) > t_kill + TIMEOUT + SLACK]
    assert not late, f"{len(late)} tasks of the dead client started after it was lost"
    assert len(ledger_a.lines()) < 200, "the dead client's queue was run"
