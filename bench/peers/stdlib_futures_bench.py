"""concurrent.futures.ProcessPoolExecutor (plain interpreter, fork start method)."""

import sys
from concurrent.futures import ProcessPoolExecutor

from common import Runner, drive, inc, run_sleep, run_true, warm


class PPE(Runner):
    name = "ProcessPoolExecutor"
    version = "python " + sys.version.split()[0]
    supports = ("W5", "W1", "W1map", "W2", "W3")

    def start(self, slots, kind):
        self.ex = ProcessPoolExecutor(max_workers=slots)

    def stop(self):
        self.ex.shutdown(wait=True, cancel_futures=True)

    def first(self):
        return self.ex.submit(inc, 1).result()

    def warmup(self, slots, dirpath):
        fs = [self.ex.submit(warm, i, slots, dirpath) for i in range(slots)]
        return [f.result() for f in fs]

    def w1(self, n):
        fs = [self.ex.submit(inc, i) for i in range(n)]
        return [f.result() for f in fs]

    def w1map(self, n):
        return list(self.ex.map(inc, range(n)))

    def w2(self, n):
        fs = [self.ex.submit(run_true) for _ in range(n)]
        return [f.result() for f in fs]

    def w3(self, ds):
        fs = [self.ex.submit(run_sleep, d) for d in ds]
        return [f.result() for f in fs]


if __name__ == "__main__":
    drive(PPE())
