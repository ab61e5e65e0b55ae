"""The scheduler core is pure: drive it with events, check its decisions."""

from __future__ import annotations

from shoal.head.core import SchedulerCore
from shoal.transport import protocol as P

A, B, OWNER = b"agent-a", b"agent-b", b"client"


def task(tid: int, deps: list[int] | None = None, cores: int = 1) -> list:
    return [tid, P.PY, 1, b"", deps or [], cores, -1]


def test_dynamic_keeps_each_agent_at_its_window():
    core = SchedulerCore()
    core.add_agent(A, 2)
    d = core.submit([task(i) for i in range(1, 11)], OWNER)
    assert not d.dispatch  # no window yet
    d = core.set_window(A, 3)
    assert [s[0] for s in d.dispatch[A]] == [1, 2, 3]
    d = core.finished(A, [[1, P.OK, b"x", None]])
    assert d.resolve[OWNER] == [[1, P.OK, b"x", 0, None]]
    assert [s[0] for s in d.dispatch[A]] == [4]  # back to 3 unfinished
    d = core.set_window(A, 1)  # a smaller window: nothing more until it drains
    assert not d.dispatch
    d = core.finished(A, [[2, P.OK, b"", None], [3, P.OK, b"", None]])
    assert not d.dispatch
    d = core.finished(A, [[4, P.OK, b"", None]])
    assert [s[0] for s in d.dispatch[A]] == [5]


def test_dynamic_spreads_over_agents_by_credit():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.add_agent(B, 4)
    core.set_window(A, 2)
    core.set_window(B, 4)
    d = core.submit([task(i) for i in range(1, 6)], OWNER)
    assert len(d.dispatch[B]) == 4 and len(d.dispatch[A]) == 1


def test_static_splits_in_contiguous_blocks_per_slot():
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.add_agent(B, 1)
    d = core.submit([task(i) for i in range(1, 8)], OWNER, static=True)
    hints_a = [(s[0], s[6]) for s in d.dispatch[A]]
    hints_b = [(s[0], s[6]) for s in d.dispatch[B]]
    assert hints_a == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1)]
    assert hints_b == [(6, 0), (7, 0)]


def test_static_waits_for_first_agent():
    core = SchedulerCore()
    assert not core.submit([task(1), task(2)], OWNER, static=True).dispatch
    d = core.add_agent(A, 2)
    assert [(s[0], s[6]) for s in d.dispatch[A]] == [(1, 0), (2, 1)]


def test_dependencies_release_and_fail():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.set_window(A, 10)
    d = core.submit([task(1), task(2, deps=[1]), task(3, deps=[2]), task(4, deps=[1])], OWNER)
    assert [s[0] for s in d.dispatch[A]] == [1]
    d = core.finished(A, [[1, P.OK, b"", None]])
    assert sorted(s[0] for s in d.dispatch[A]) == [2, 4]
    d = core.finished(A, [[2, P.ERR, b"boom", None]])
    statuses = {r[0]: r[1] for r in d.resolve[OWNER]}
    assert statuses == {2: P.ERR, 3: P.DEPFAIL}
    # a task submitted later on a failed dependency fails at once
    d = core.submit([task(5, deps=[2])], OWNER)
    assert d.resolve[OWNER][0][:2] == [5, P.DEPFAIL]
    # ... and on a finished one runs at once
    d = core.submit([task(6, deps=[1])], OWNER)
    assert [s[0] for s in d.dispatch[A]] == [6]


def test_cancel_only_before_dispatch():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.set_window(A, 1)
    core.submit([task(1), task(2), task(3, deps=[2])], OWNER)
    done, d = core.cancel([1, 2], OWNER)
    assert done == [2]  # 1 is already on the agent
    assert d.resolve[OWNER] == [[3, P.DEPFAIL, b"dependency task 2 was cancelled or lost", 0, None]]
    assert 2 not in core.tasks and 1 in core.tasks


def test_impossible_resources_fail_with_a_clear_error():
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.set_window(A, 4)
    d = core.submit([task(1, cores=8), task(2)], OWNER)
    assert [s[0] for s in d.dispatch[A]] == [2]
    item = d.resolve[OWNER][0]
    assert item[:2] == [1, P.ERR] and b"8 cores" in item[2] and b"has 2" in item[2]


def test_multicore_task_waits_for_enough_credit():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.set_window(A, 2)
    d = core.submit([task(1, cores=3), task(2)], OWNER)
    assert not d.dispatch  # FIFO: the 3-core task waits for room
    d = core.set_window(A, 3)
    assert [s[0] for s in d.dispatch[A]] == [1]


def test_lost_agent_requeues_its_tasks():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.set_window(A, 2)
    core.submit([task(1), task(2), task(3)], OWNER)
    d = core.remove_agent(A, "killed")
    assert not d.resolve  # lost attempts run again (crash limit 3)
    assert [t.tid for t in core.ready] == [1, 2, 3]


def test_owner_leaving_drops_its_tasks():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.set_window(A, 1)
    core.submit([task(1), task(2)], OWNER)
    d = core.cancel_owner(OWNER)
    assert d.revoke == {A: [1]}
    assert not core.tasks and not core.ready


def placed(tid: int, agent: bytes, hard: bool, cores: int = 1) -> list:
    return [tid, P.PY, 1, b"", [], cores, -1, [agent.decode(), hard]]


def test_placed_tasks_go_to_their_agent_first():
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.add_agent(B, 2)
    core.set_window(A, 2)
    d = core.submit([task(1), placed(2, B, True), placed(3, B, False), task(4)], OWNER)
    assert [s[0] for s in d.dispatch[A]] == [1, 4]  # B has no window yet: its tasks wait
    d = core.set_window(B, 2)
    assert [s[0] for s in d.dispatch[B]] == [2, 3]


def test_soft_placement_is_stolen_only_by_idle_agents_and_hard_never():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.add_agent(B, 1)
    core.set_window(B, 1)
    d = core.submit([placed(i, B, hard=(i % 2 == 0)) for i in range(1, 7)], OWNER)
    assert [s[0] for s in d.dispatch[B]] == [1]
    d = core.set_window(A, 2)  # A idles while B is full: it takes soft ones only
    assert [s[0] for s in d.dispatch[A]] == [3, 5]
    d = core.finished(B, [[1, P.OK, b"", None]])
    assert [s[0] for s in d.dispatch[B]] == [2]
    d = core.finished(A, [[3, P.OK, b"", None], [5, P.OK, b"", None]])
    assert A not in d.dispatch  # 4 and 6 are pinned to B


def test_hard_placement_errors_and_loss():
    core = SchedulerCore()
    core.add_agent(A, 2)
    d = core.submit([placed(1, b"nobody", True), placed(2, A, True, cores=4)], OWNER)
    errs = {i[0]: bytes(i[2]).decode() for i in d.resolve[OWNER]}
    assert "no agent named 'nobody'" in errs[1] and "agent-a has 2" in errs[2]
    core.add_agent(B, 1)
    core.submit([placed(3, B, True), placed(4, B, False)], OWNER)
    d = core.remove_agent(B, "node died")
    assert [(i[0], i[1]) for i in d.resolve[OWNER]] == [(3, P.LOST)]
    assert [t.tid for t in core.ready] == [4]  # the soft one goes back to the shared queue
    d = core.set_window(A, 1)
    assert [s[0] for s in d.dispatch[A]] == [4]


def test_cancel_a_placed_task():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.submit([placed(1, A, True), placed(2, A, False)], OWNER)
    done, _ = core.cancel([2], OWNER)
    assert done == [2] and core.placed == 1
    d = core.set_window(A, 4)
    assert [s[0] for s in d.dispatch[A]] == [1]


def test_the_head_process_collector_thresholds_are_set_and_restorable():
    import gc

    from shoal.head.core import GC_THRESHOLDS, tune_gc

    before = gc.get_threshold()
    try:
        assert tune_gc() == before
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        gc.set_threshold(*before)
