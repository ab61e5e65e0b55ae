"""multiprocessing.Pool (plain interpreter, fork start method): apply_async and map."""

import multiprocessing
import sys

from common import Runner, drive, inc, run_sleep, run_true, warm


class MPPool(Runner):
    name = "multiprocessing.Pool"
    version = "python " + sys.version.split()[0]
    supports = ("W5", "W1", "W1map", "W2", "W3")

    def start(self, slots, kind):
        self.pool = multiprocessing.Pool(processes=slots)

    def stop(self):
        self.pool.close()
        self.pool.join()

    def first(self):
        return self.pool.apply_async(inc, (1,)).get()

    def warmup(self, slots, dirpath):
        rs = [self.pool.apply_async(warm, (i, slots, dirpath)) for i in range(slots)]
        return [r.get() for r in rs]

    def w1(self, n):
        rs = [self.pool.apply_async(inc, (i,)) for i in range(n)]
        return [r.get() for r in rs]

    def w1map(self, n):
        return self.pool.map(inc, range(n))

    def w2(self, n):
        rs = [self.pool.apply_async(run_true) for _ in range(n)]
        return [r.get() for r in rs]

    def w3(self, ds):
        rs = [self.pool.apply_async(run_sleep, (d,)) for d in ds]
        return [r.get() for r in rs]


if __name__ == "__main__":
    drive(MPPool())
