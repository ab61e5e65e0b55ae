from __future__ import annotations

import pytest

from .harness import Cluster, NetNS, Tracker


@pytest.fixture
def tracker():
    """Tracks every process the test starts; fails the test if any is left at the end."""
    t = Tracker()
    yield t
    left = t.close()
    assert not left, f"processes left behind: {left}"


@pytest.fixture
def make_cluster(tmp_path, tracker, request):
    """``make_cluster(heartbeat_timeout=2, ...)`` -> a Cluster, closed at the end.

    On failure, the tail of every process's log is printed (pytest shows it)."""
    made: list[Cluster] = []

    def make(**kw) -> Cluster:
        d = tmp_path / f"run{len(made)}"
        d.mkdir()
        c = Cluster(str(d), tracker, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(c.describe())
        c.close()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def netns():
    """A network namespace joined to the host by a veth pair (see harness.NetNS)."""
    ns = NetNS()
    yield ns
    ns.close()
