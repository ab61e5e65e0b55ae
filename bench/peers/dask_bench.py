"""Dask distributed: LocalCluster, 2 worker processes x 1 thread (W3: 2 workers x slots/2 threads).

Repeated identical calls need ``pure=False``, else Dask computes them once under one key.
W4 uses ``get_client()`` + ``secede()``/``rejoin()`` inside tasks, so a waiting parent gives its
thread back to the worker.
"""

import dask
import distributed
from common import Runner, drive, inc, run_sleep, run_true, warm
from distributed import Client, LocalCluster, get_client, rejoin, secede


def tree(d):
    if d == 0:
        return 1
    c = get_client()
    a = c.submit(tree, d - 1, pure=False)
    b = c.submit(tree, d - 1, pure=False)
    secede()
    ra, rb = c.gather([a, b])
    rejoin()
    return ra + rb


class Dask(Runner):
    name = "Dask distributed"
    version = f"dask {dask.__version__} / distributed {distributed.__version__}"
    supports = ("W5", "W1", "W1map", "W2", "W3", "W4")

    def start(self, slots, kind):
        if kind == "py":
            nw, nt = 2, 1
        else:
            nw, nt = 2, max(1, slots // 2)
        self.cluster = LocalCluster(
            n_workers=nw,
            threads_per_worker=nt,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        )
        self.client = Client(self.cluster)

    def stop(self):
        self.client.close()
        self.cluster.close()

    def first(self):
        return self.client.submit(inc, 1, pure=False).result()

    def warmup(self, slots, dirpath):
        fs = [self.client.submit(warm, i, slots, dirpath, pure=False) for i in range(slots)]
        return self.client.gather(fs)

    def w1(self, n):
        fs = [self.client.submit(inc, i, pure=False) for i in range(n)]
        return self.client.gather(fs)

    def w1map(self, n):
        return self.client.gather(self.client.map(inc, range(n), pure=False))

    def w2(self, n):
        fs = [self.client.submit(run_true, pure=False) for _ in range(n)]
        return self.client.gather(fs)

    def w3(self, ds):
        fs = [self.client.submit(run_sleep, d, pure=False) for d in ds]
        return self.client.gather(fs)

    def w4(self, depth):
        return self.client.submit(tree, depth, pure=False).result()


if __name__ == "__main__":
    drive(Dask())
