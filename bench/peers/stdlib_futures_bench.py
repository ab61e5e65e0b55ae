"""concurrent.futures.ProcessPoolExecutor (plain interpreter, fork start method)."""

import sys
from concurrent.futures import ProcessPoolExecutor

from common import ExecutorRunner, drive, run_sleep, run_true


class PPE(ExecutorRunner):
    name = "ProcessPoolExecutor"
    version = "python " + sys.version.split()[0]
    supports = ("W5", "W1", "W1map", "W2", "W3")

    def start(self, slots, kind):
        self.ex = ProcessPoolExecutor(max_workers=slots)

    def stop(self):
        self.ex.shutdown(wait=True, cancel_futures=True)

    def w2(self, n):
        fs = [self.ex.submit(run_true) for _ in range(n)]
        return [f.result() for f in fs]

    def w3(self, ds):
        fs = [self.ex.submit(run_sleep, d) for d in ds]
        return [f.result() for f in fs]


if __name__ == "__main__":
    drive(PPE())
