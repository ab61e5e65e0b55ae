"""ipyparallel: a local cluster (controller + ``slots`` engines) on loopback; load-balanced view."""

import ipyparallel as ipp
from common import Runner, drive, inc, run_sleep, run_true, warm


class IPP(Runner):
    name = "ipyparallel"
    version = "ipyparallel " + ipp.__version__
    supports = ("W5", "W1", "W1map", "W2", "W3")

    def start(self, slots, kind):
        self.cluster = ipp.Cluster(n=slots, controller_ip="127.0.0.1", log_level=40)
        self.rc = self.cluster.start_and_connect_sync()
        self.rc.wait_for_engines(slots, timeout=600)
        self.view = self.rc.load_balanced_view()

    def stop(self):
        try:
            self.rc.close()
        finally:
            self.cluster.stop_cluster_sync()

    def first(self):
        return self.view.apply_async(inc, 1).get()

    def warmup(self, slots, dirpath):
        rs = [self.view.apply_async(warm, i, slots, dirpath) for i in range(slots)]
        return [r.get() for r in rs]

    def w1(self, n):
        rs = [self.view.apply_async(inc, i) for i in range(n)]
        return [r.get() for r in rs]

    def w1map(self, n):
        return self.view.map_sync(inc, range(n))

    def w2(self, n):
        rs = [self.view.apply_async(run_true) for _ in range(n)]
        return [r.get() for r in rs]

    def w3(self, ds):
        rs = [self.view.apply_async(run_sleep, d) for d in ds]
        return [r.get() for r in rs]


if __name__ == "__main__":
    drive(IPP())
