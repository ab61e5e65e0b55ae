"""Monte Carlo estimate of pi, SCOOP style: run with `python -m shoal examples/pi.py`."""

import random
import sys

from shoal import futures


def hits(n: int, seed: int) -> int:
    rng = random.Random(seed)
    return sum(1 for _ in range(n) if rng.random() ** 2 + rng.random() ** 2 <= 1.0)


if __name__ == "__main__":
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    per_task = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    total = sum(futures.map(hits, [per_task] * tasks, range(tasks)))
    print(f"pi ~= {4.0 * total / (tasks * per_task):.5f} from {tasks * per_task:,} samples "
          f"in {tasks} tasks")
