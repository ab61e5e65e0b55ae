"""mapReduce/mapScan of 1,000,000 small items: shoal (2 workers) vs serial and Pool(2).

Run: PYTHONPATH=. python bench/map_reduce_bench.py   (numbers in docs/scoop.md)
"""
import functools
import itertools
import operator
import time
from multiprocessing import Pool

from shoal import Executor, futures


def sq(x): return x * x

def best(f, k=3):
    ts = []
    for _ in range(k):
        t = time.perf_counter(); r = f(); ts.append(time.perf_counter() - t)
    return r, min(ts)

if __name__ == "__main__":
    n = 1_000_000
    want = sum(x * x for x in range(n))
    for name, xs in (("range", range(n)), ("list", list(range(n)))):
        r, ts = best(lambda: functools.reduce(operator.add, map(sq, xs)))
        assert r == want
        with Pool(2) as p:
            p.map(sq, range(10))
            r, tp = best(lambda: functools.reduce(operator.add, p.map(sq, xs)))
            assert r == want
            r, tps = best(lambda: list(itertools.accumulate(p.map(sq, xs), operator.add)))
        with Executor(workers=2) as ex:
            futures.set_executor(ex)
            futures.mapReduce(sq, operator.add, range(1000))
            r, tm = best(lambda: futures.mapReduce(sq, operator.add, xs)); assert r == want
            r, tsc = best(lambda: futures.mapScan(sq, operator.add, xs)); assert r[-1] == want
            futures.set_executor(None)
        print(f"{name}: serial reduce(map) {ts:.3f}s | Pool(2).map+reduce {tp:.3f}s | shoal mapReduce {tm:.3f}s"
              f" | Pool(2).map+accumulate {tps:.3f}s | shoal mapScan {tsc:.3f}s", flush=True)
