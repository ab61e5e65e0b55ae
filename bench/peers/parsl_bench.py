"""Parsl HighThroughputExecutor: one local block with ``slots`` workers, on loopback.

W2/W3 use ``bash_app`` (Parsl's idiom for command tasks); W4 uses ``join_app``.
"""

import os

import parsl
from common import Runner, drive, inc, warm
from parsl.app.app import bash_app, join_app, python_app
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider

p_inc = python_app(inc, executors=["htex"])
p_warm = python_app(warm, executors=["htex"])


@bash_app(executors=["htex"])
def p_true():
    return "/bin/true"


@bash_app(executors=["htex"])
def p_sleep(d):
    return "sleep " + d


@python_app(executors=["htex"])
def p_one():
    return 1


@python_app(executors=["htex"])
def p_add(a, b):
    return a + b


@join_app
def p_tree(d):
    if d == 0:
        return p_one()
    return p_add(p_tree(d - 1), p_tree(d - 1))


class Parsl(Runner):
    name = "Parsl HTEX"
    version = "parsl " + parsl.__version__
    supports = ("W5", "W1", "W2", "W3", "W4")

    def start(self, slots, kind):
        workdir = os.environ.get("BENCH_WORKDIR", ".")
        htex = HighThroughputExecutor(
            label="htex",
            address="127.0.0.1",
            loopback_address="127.0.0.1",
            max_workers_per_node=slots,
            cores_per_worker=1.0 / slots,
            provider=LocalProvider(init_blocks=1, min_blocks=1, max_blocks=1),
        )
        cfg = Config(
            executors=[htex],
            run_dir=os.path.join(workdir, "runinfo"),
            strategy="none",
            usage_tracking=0,
            initialize_logging=False,
        )
        self.dfk = parsl.load(cfg)

    def stop(self):
        self.dfk.cleanup()

    def first(self):
        return p_inc(1).result()

    def warmup(self, slots, dirpath):
        fs = [p_warm(i, slots, dirpath) for i in range(slots)]
        return [f.result() for f in fs]

    def w1(self, n):
        fs = [p_inc(i) for i in range(n)]
        return [f.result() for f in fs]

    def w2(self, n):
        fs = [p_true() for _ in range(n)]
        return [f.result() for f in fs]

    def w3(self, ds):
        fs = [p_sleep(d) for d in ds]
        return [f.result() for f in fs]

    def w4(self, depth):
        return p_tree(depth).result()


if __name__ == "__main__":
    drive(Parsl())
