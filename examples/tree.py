"""Divide and conquer: tasks that submit tasks and wait on them, any depth.

`python -m shoal -n 2 examples/tree.py 10` runs 2,047 tasks on 2 workers: a task waiting
on its children yields its worker, so the tree never deadlocks.
"""

import sys

from shoal import futures


def tree(depth: int) -> int:
    if depth == 0:
        return 1
    left = futures.submit(tree, depth - 1)
    right = futures.submit(tree, depth - 1)
    return left.result() + right.result()


if __name__ == "__main__":
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    print(f"tree({depth}) = {futures.submit(tree, depth).result()} leaves")
