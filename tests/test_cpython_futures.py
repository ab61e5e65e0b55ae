"""CPython's own concurrent.futures tests, run against shoal's Executor.

The test module is the one Debian ships in ``libpython3.11-testsuite`` (installed by
scripts/setup.sh), used in place, never copied: its executor-generic classes
(``ExecutorTest``, ``WaitTests``, ``AsCompletedTests``, ``ExecutorShutdownTest``,
``InitializerMixin``, ``FailingInitializerMixin``) are combined with :class:`ShoalMixin`,
which supplies ``shoal.Executor`` where CPython's mixins supply ``ThreadPoolExecutor`` or
``ProcessPoolExecutor``, as CPython's own ``create_executor_tests`` does.

Workers import the module's helpers (``mul``, ``init``, ``get_init_status`` ...) by name,
so it must be importable there too, under a name that does not clash with the running
interpreter's own ``test`` package: a symlink ``cpython_test_concurrent_futures.py`` in a
temporary directory put first on ``sys.path`` (the local default's workers get the
caller's ``sys.path``).

Three tests of ``ExecutorShutdownTest`` cannot target any executor outside the standard
library: they start ``python -I -c "from concurrent.futures import <executor class>"`` and
import the helpers from ``test.test_concurrent_futures``. They are skipped here; the same
behaviours (exit waits for pending tasks, ``submit`` from an atexit hook raises
RuntimeError, ``shutdown(wait=False)`` then exit still runs the task) are checked side by
side with ProcessPoolExecutor in tests/test_conformance.py.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import shutil
import sys
import tempfile
import unittest
from collections.abc import Iterator

import pytest

import shoal

_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
SOURCE = f"/usr/lib/python{_VERSION}/test/test_concurrent_futures.py"
MODULE = "cpython_test_concurrent_futures"

if _VERSION != "3.11":  # 3.12 split the module into a package with other class names
    pytest.skip(f"runs CPython 3.11's test module; this is Python {_VERSION}",
                allow_module_level=True)
if not os.path.exists(SOURCE):
    pytest.skip(f"{SOURCE} is missing: install Debian's libpython{_VERSION}-testsuite "
                "(bash scripts/setup.sh does)", allow_module_level=True)

_dir = tempfile.mkdtemp(prefix="shoal-cpython-tests-")
atexit.register(shutil.rmtree, _dir, True)
os.symlink(SOURCE, os.path.join(_dir, MODULE + ".py"))
sys.path.insert(0, _dir)
cft = importlib.import_module(MODULE)

# CPython's executor-generic test classes (the ones its create_executor_tests combines
# with every executor mixin)
GENERIC = (cft.ExecutorTest, cft.WaitTests, cft.AsCompletedTests, cft.ExecutorShutdownTest,
           cft.InitializerMixin, cft.FailingInitializerMixin)

# tests that start `python -I` importing the executor from concurrent.futures by class name
STDLIB_ONLY = {
    "test_interpreter_shutdown": "test_exit_waits_for_pending_tasks",
    "test_submit_after_interpreter_shutdown": "test_submit_from_atexit_hook_raises",
    "test_hang_gh83386": "test_shutdown_without_wait_then_exit_runs_the_task",
}


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap() -> Iterator[None]:
    """CPython's tests call ``support.gc_collect()`` (three full collections) after each
    result, e.g. 30 in ``test_free_reference``: in a whole-suite run each one scanned every
    object the session had made so far (12 s for that test). What existed before this
    module is frozen (``gc.freeze``), so a collection scans only what these tests make; the
    weak references they check are to their own new objects, collected as before."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


class ShoalMixin(cft.ExecutorMixin):
    """Supplies shoal's Executor (the local default) to CPython's test classes."""

    executor_type = shoal.Executor


def _skip(name: str, instead: str) -> object:
    @unittest.skip(f"{name} starts `python -I` that imports the executor from "
                   f"concurrent.futures by class name; tests/test_conformance.py::{instead} "
                   "checks the same behaviour for shoal and ProcessPoolExecutor")
    def test(self: object) -> None:
        pass

    test.__name__ = name
    return test


def _make(generic: type) -> type:
    name = generic.__name__
    for suffix in ("Mixin", "Tests", "Test"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    body = {n: _skip(n, instead) for n, instead in STDLIB_ONLY.items() if hasattr(generic, n)}
    return type(f"Shoal{name}Test", (generic, ShoalMixin, cft.BaseTestCase), body)


for _generic in GENERIC:
    _cls = _make(_generic)
    globals()[_cls.__name__] = _cls
del _generic, _cls
