"""1,000,000 no-op tasks through one Executor: client and head memory, tasks/s (issue 10).

    PYTHONPATH=. python bench/million.py              # 1,000,000 tasks, 2 workers
    PYTHONPATH=. python bench/million.py -n 100000    # the quick check

Submits ``n`` x ``ex.submit(noop)`` one by one (the caller keeps every future, as a program
collecting results would), then waits for all. Reports the submit time, the end-to-end time
(first submit to last result), tasks/s, and the peak resident memory (``VmHWM`` of
``/proc/PID/status``) of the client and of the head, with bytes per task over the baseline
taken just before the first submit (for the head: its peak minus its size at that moment).
The last line is one JSON object (``@@BENCH {...}``) for scripts.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import time


def noop() -> None:
    return None


def _status(pid: int, field: str) -> int:
    """A ``kB`` field of /proc/PID/status, in bytes (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--tasks", type=int, default=1_000_000)
    ap.add_argument("-w", "--workers", type=int, default=2)
    args = ap.parse_args(argv)
    from shoal import Executor

    me = os.getpid()
    with Executor(workers=args.workers) as ex:
        ex.submit(noop).result()  # warm: functions cached, workers up
        head_pid = ex._cluster.head.pid
        base_client = _status(me, "VmRSS")
        base_head = _status(head_pid, "VmRSS")
        t0 = time.perf_counter()
        futs = [ex.submit(noop) for _ in range(args.tasks)]
        t_submit = time.perf_counter() - t0
        rss_after_submit = _status(me, "VmRSS")
        cf.wait(futs)
        t_all = time.perf_counter() - t0
        peak_client = _status(me, "VmHWM")
        peak_head = _status(head_pid, "VmHWM")
        errors = sum(1 for f in futs if f.exception() is not None)
        del futs
    n = args.tasks
    row = {
        "tasks": n, "workers": args.workers, "errors": errors,
        "submit_s": round(t_submit, 2), "submit_per_s": round(n / t_submit),
        "total_s": round(t_all, 2), "tasks_per_s": round(n / t_all),
        "client_peak_mb": round(peak_client / 2**20, 1),
        "client_bytes_per_task": round((peak_client - base_client) / n),
        "client_held_bytes_per_task": round((rss_after_submit - base_client) / n),
        "head_peak_mb": round(peak_head / 2**20, 1),
        "head_bytes_per_task": round((peak_head - base_head) / n),
    }
    print(f"{n:,} no-op tasks, {args.workers} workers: submit {row['submit_s']} s "
          f"({row['submit_per_s']:,}/s), all done {row['total_s']} s ({row['tasks_per_s']:,} tasks/s)")
    print(f"client peak {row['client_peak_mb']} MB ({row['client_bytes_per_task']} B/task; "
          f"{row['client_held_bytes_per_task']} B/task held after submit), "
          f"head peak {row['head_peak_mb']} MB ({row['head_bytes_per_task']} B/task)")
    print("@@BENCH " + json.dumps(row))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
