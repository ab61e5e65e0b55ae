"""mapReduce/mapScan of 1,000,000 small items: shoal (2 workers) vs serial and Pool(2).

Run: PYTHONPATH=. python bench/map_reduce_bench.py   (numbers in docs/scoop.md)
"""

import functools
import itertools
import operator
import time
from multiprocessing import Pool

from shoal import Executor, futures


def sq(x):
    return x * x


def best(f, xs, k=3):
    ts = []
    for _ in range(k):
        t = time.perf_counter()
        r = f(xs)
        ts.append(time.perf_counter() - t)
    return r, min(ts)


def main() -> None:
    n = 1_000_000
    want = sum(x * x for x in range(n))
    for name, xs in (("range", range(n)), ("list", list(range(n)))):
        r, ts = best(lambda v: functools.reduce(operator.add, map(sq, v)), xs)
        assert r == want
        with Pool(2) as p:
            p.map(sq, range(10))
            r, tp = best(lambda v, p=p: functools.reduce(operator.add, p.map(sq, v)), xs)
            assert r == want
            _, tps = best(lambda v, p=p: list(itertools.accumulate(p.map(sq, v), operator.add)), xs)
        with Executor(workers=2) as ex:
            futures.set_executor(ex)
            futures.mapReduce(sq, operator.add, range(1000))
            r, tm = best(lambda v: futures.mapReduce(sq, operator.add, v), xs)
            assert r == want
            r, tsc = best(lambda v: futures.mapScan(sq, operator.add, v), xs)
            assert r[-1] == want
            futures.set_executor(None)
        print(f"{name}: serial reduce(map) {ts:.3f}s | Pool(2).map+reduce {tp:.3f}s | "
              f"shoal mapReduce {tm:.3f}s | Pool(2).map+accumulate {tps:.3f}s | "
              f"shoal mapScan {tsc:.3f}s", flush=True)


if __name__ == "__main__":
    main()
