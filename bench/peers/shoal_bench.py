"""shoal: the local default (head + one agent) in the project venv.

W1/W2/W4/W5: ``Executor(workers=2)``; W2 submits ``Command(["/bin/true"])``.
W3: ``Executor(workers=0, slots=N)``: N command slots, no Python workers.
W4: ``futures.submit`` inside tasks (a waiting parent yields its worker).
"""

from common import ExecutorRunner, drive

import shoal
from shoal import Command, Executor


def tree(d):
    if d == 0:
        return 1
    from shoal import futures

    a = futures.submit(tree, d - 1)
    b = futures.submit(tree, d - 1)
    return a.result() + b.result()


class Shoal(ExecutorRunner):
    name = "shoal"
    version = "shoal " + getattr(shoal, "__version__", "?")
    supports = ("W5", "W1", "W1map", "W2", "W3", "W4")

    def start(self, slots, kind):
        if kind == "py":
            self.ex = Executor(workers=slots)
        else:
            self.ex = Executor(workers=0, slots=slots)
        self.ex.__enter__()
        self.kind = kind

    def stop(self):
        self.ex.__exit__(None, None, None)

    def warmup(self, slots, dirpath):
        if self.kind == "cmd":  # no Python workers: one command per slot
            fs = [self.ex.submit(Command(["/bin/true"])) for _ in range(slots)]
            return [f.result().returncode == 0 for f in fs]
        return super().warmup(slots, dirpath)

    def w2(self, n):
        fs = [self.ex.submit(Command(["/bin/true"])) for _ in range(n)]
        return [f.result().returncode for f in fs]

    def w3(self, ds):
        fs = [self.ex.submit(Command(["sleep", d])) for d in ds]
        return [f.result().returncode for f in fs]

    def w4(self, depth):
        return self.ex.submit(tree, depth).result()


if __name__ == "__main__":
    drive(Shoal())
