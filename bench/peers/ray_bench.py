"""Ray, local: ray.init(num_cpus=slots), one CPU per task (default).

W3 pre-starts one worker process per slot with the warm-up barrier (else Ray starts workers
while the timed tasks wait).  W4 calls ray.get inside tasks: Ray releases the blocked task's CPU
and starts another worker process for each blocked level.
"""

import os

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
from common import Runner, drive, inc, run_sleep, run_true, warm  # noqa: E402

r_inc = ray.remote(inc)
r_true = ray.remote(run_true)
r_sleep = ray.remote(run_sleep)
r_warm = ray.remote(warm)


@ray.remote
def tree(d):
    if d == 0:
        return 1
    return sum(ray.get([tree.remote(d - 1), tree.remote(d - 1)]))


class Ray(Runner):
    name = "Ray"
    version = "ray " + ray.__version__
    supports = ("W5", "W1", "W2", "W3", "W4")

    def start(self, slots, kind):
        ray.init(
            num_cpus=slots,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _node_ip_address="127.0.0.1",
        )

    def stop(self):
        ray.shutdown()

    def first(self):
        return ray.get(r_inc.remote(1))

    def warmup(self, slots, dirpath):
        return ray.get([r_warm.remote(i, slots, dirpath) for i in range(slots)])

    def w1(self, n):
        return ray.get([r_inc.remote(i) for i in range(n)])

    def w2(self, n):
        return ray.get([r_true.remote() for _ in range(n)])

    def w3(self, ds):
        return ray.get([r_sleep.remote(d) for d in ds])

    def w4(self, depth):
        return ray.get(tree.remote(depth))


if __name__ == "__main__":
    drive(Ray())
