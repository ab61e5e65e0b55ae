"""Tasks that state their run time (``opts["estimate"]``) in the pure scheduler core:
longest first (LPT), no prefetch for long ones, and nothing lost between the buckets."""

from __future__ import annotations

from shoal.head.core import SchedulerCore
from shoal.transport import protocol as P

A, B, OWNER = b"agent-a", b"agent-b", b"client"


def task(tid: int, est: float | None = None, cores: int = 1, **opts: object) -> list:
    if est is not None:
        opts["estimate"] = est
    return [tid, P.CMD, 0, b"", [], cores, -1, None, opts or None]


def sent(d, agent: bytes) -> list[int]:
    return [s[0] for s in d.dispatch.get(agent, [])]


def ok(*tids: int) -> list[list]:
    return [[t, P.OK, b"", None] for t in tids]


def run_all(core: SchedulerCore, d, agent: bytes) -> list[int]:
    """Finish every task sent to ``agent`` one at a time; the order they were sent in."""
    order = sent(d, agent)
    i = 0
    while i < len(order):
        order += sent(core.finished(agent, ok(order[i])), agent)
        i += 1
    return order


def test_tasks_with_estimates_go_longest_first_across_submissions():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.set_window(A, 1)
    d = core.submit([task(1, 0.01)], OWNER)  # starts at once: nothing else is queued
    core.submit([task(2, 0.5), task(3, 0.05), task(4, 0.3)], OWNER)
    core.submit([task(5, 0.2), task(6, 0.5), task(7, 0.05)], OWNER)
    # equal estimates keep their submission order
    assert run_all(core, d, A) == [1, 2, 6, 4, 5, 3, 7]
    assert core.queued() == 0 and not core.tasks


def test_tasks_without_estimates_keep_fifo_and_go_before_later_estimated_ones():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.set_window(A, 1)
    d = core.submit([task(1), task(2), task(3, 0.2), task(4, 0.4), task(5)], OWNER)
    order = run_all(core, d, A)
    assert order[:2] == [1, 2] and order.index(4) < order.index(3)
    assert sorted(order) == [1, 2, 3, 4, 5]


def test_long_tasks_are_not_prefetched_short_ones_are():
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.set_window(A, 4)  # prefetch 1
    d = core.submit([task(i, 5.0) for i in range(1, 5)], OWNER)
    assert sent(d, A) == [1, 2] and core.queued() == 2  # free cores only
    d = core.finished(A, ok(1))
    assert sent(d, A) == [3]
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.set_window(A, 4)
    d = core.submit([task(i, 0.01) for i in range(1, 5)], OWNER)
    assert sent(d, A) == [1, 2, 3, 4]  # short: the window's prefetch as before
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.set_window(A, 4)
    d = core.submit([task(i) for i in range(1, 5)], OWNER)
    assert sent(d, A) == [1, 2, 3, 4]  # unknown length: as before


def test_cancel_and_owner_loss_reach_the_waiting_buckets():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.set_window(A, 1)
    d = core.submit([task(1, 9.0), task(2, 1.0), task(3, 2.0), task(4, 4.0)], OWNER)
    assert sent(d, A) == [1] and core.queued() == 3
    done, _ = core.cancel([3], OWNER)
    assert done == [3] and core.queued() == 2
    assert run_all(core, d, A) == [1, 4, 2]
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.set_window(A, 1)
    core.submit([task(1, 9.0), task(2, 1.0), task(3, 2.0)], OWNER)
    core.cancel_owner(OWNER)
    assert core.queued() == 0 and not core.tasks


def test_estimates_order_shaped_tasks_and_big_first_orders_length_before_size():
    core = SchedulerCore(big_first=True)
    core.add_agent(A, 8, gpus=1)
    core.set_window(A, 8)
    d = core.submit([task(1, 1.0, cores=8, gpus=1)], OWNER)
    assert sent(d, A) == [1]
    core.submit([task(2, 1.0, cores=8, gpus=1), task(3, 3.0, cores=4, gpus=1),
                 task(4, 2.0, cores=8, gpus=1), task(5, 5.0, cores=1)], OWNER)
    # longest first whatever the size; the plain task's 5 s before the GPU tasks
    assert run_all(core, d, A) == [1, 5, 3, 4, 2]


def test_a_retried_task_with_an_estimate_is_not_lost():
    core = SchedulerCore()
    core.add_agent(A, 1)
    core.add_agent(B, 1)
    core.set_window(A, 1)
    core.set_window(B, 1)
    d = core.submit([task(1, 3.0, retries=1), task(2, 2.0), task(3, 1.0)], OWNER)
    assert sent(d, A) == [1] and sent(d, B) == [2]
    d = core.finished(A, [[1, P.ERR, b"boom", None, {"types": ["builtins.Exception"]}]])
    assert d.later and sent(d, A) == [3]  # 1 waits for its retry; A takes the next bucket
    assert not sent(core.requeue([1]), A)  # A is busy with 3
    assert sent(core.finished(B, ok(2)), B) == [1]
    assert core.queued() == 0


def test_big_first_long_multi_core_tasks_go_to_an_agent_whose_cores_freed():
    # the refill of one agent is limited to its free cores; big_first's test of free cores
    # read the window less the credit as what it holds, which is wrong under that limit (the
    # agent sat idle with its queue full when long tasks were not prefetched)
    core = SchedulerCore(big_first=True)
    core.add_agent(A, 8)
    core.set_window(A, 16)  # prefetch 1
    d = core.submit([task(1, 60.0, cores=8), task(2, 50.0, cores=4), task(3, 50.0, cores=4)],
                    OWNER)
    assert sent(d, A) == [1]
    assert sent(core.finished(A, ok(1)), A) == [2, 3]


def test_deferred_fill_places_a_turns_submissions_together():
    # the server reads every SUBMIT of a turn, then fills: a large task in the second
    # message goes before the first message's small ones (big_first), which would otherwise
    # have taken its cores
    core = SchedulerCore(big_first=True)
    core.defer_fill = True
    core.add_agent(A, 8, gpus=1)
    core.set_window(A, 8)
    assert not core.submit([task(i) for i in range(1, 9)], OWNER).dispatch
    assert not core.submit([task(9, cores=8, gpus=1)], OWNER).dispatch
    assert core.unfilled
    assert sent(core.fill(), A) == [9]
    assert not core.unfilled and not core.fill().dispatch


def test_results_one_at_a_time_keep_longest_first_and_long_tasks_on_free_cores_only():
    """The steady state's short path (a result, room for one 1-core task): the same order
    and the same rule as the general fill, across buckets and agents."""
    core = SchedulerCore()
    for name in (A, B):
        core.add_agent(name, 4)
        core.set_window(name, 8)  # prefetch 1: long tasks still only take free cores
    ests = [1 + (i * 7919) % 97 / 10 for i in range(60)]  # 1-10.6 s, shuffled
    d = core.submit([task(i + 1, e) for i, e in enumerate(ests)], OWNER)
    held = {A: sent(d, A), B: sent(d, B)}
    assert len(held[A]) == len(held[B]) == 4  # free cores only
    order = held[A] + held[B]
    while held[A] or held[B]:
        name = A if len(held[A]) >= len(held[B]) else B
        d = core.finished(name, ok(held[name].pop(0)))
        got = sent(d, name)
        assert len(got) <= 1 and not d.dispatch.keys() - {name}
        held[name] += got
        order += got
        assert all(len(h) <= 4 for h in held.values())  # never beyond the free cores
    assert sorted(order) == list(range(1, 61)) and core.completed == 60
    buckets = [core_bucket(ests[t - 1]) for t in order[8:]]
    assert buckets == sorted(buckets, reverse=True)  # longest bucket first


def core_bucket(est: float) -> int:
    from shoal.head.need import est_bucket

    return est_bucket({"estimate": est})  # type: ignore[return-value]


def test_a_multi_core_task_among_one_core_ones_waits_for_its_room_with_results_one_at_a_time():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.set_window(A, 4)
    specs = [task(1, 5.0), task(2, 5.0), task(3, 5.0), task(4, 5.0), task(5, 5.0, cores=2),
             task(6, 5.0), task(7, 5.0)]
    d = core.submit(specs, OWNER)
    assert sent(d, A) == [1, 2, 3, 4]
    assert sent(core.finished(A, ok(1)), A) == []  # one core free: the 2-core task waits
    assert sent(core.finished(A, ok(2)), A) == [5]  # two: it goes, still before 6 and 7
    assert sent(core.finished(A, ok(3)), A) == [6]
    assert sent(core.finished(A, ok(4)), A) == [7]
    assert sent(core.finished(A, ok(5, 6, 7)), A) == [] and not core.tasks


def test_a_cancelled_queued_task_is_not_sent_by_the_short_path():
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.set_window(A, 2)
    d = core.submit([task(i, 3.0) for i in range(1, 6)], OWNER)
    assert sent(d, A) == [1, 2]
    done, _ = core.cancel([3], OWNER)
    assert done == [3]
    assert sent(core.finished(A, ok(1)), A) == [4]
    core.cancel_owner(b"someone-else")  # (rebuilds the queues: nothing of OWNER's goes)
    assert sent(core.finished(A, ok(2)), A) == [5]
    assert sent(core.finished(A, ok(4, 5)), A) == [] and not core.tasks and core.completed == 5


def test_when_the_last_long_task_goes_the_short_ones_behind_it_are_prefetched_at_once():
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.set_window(A, 4)
    d = core.submit([task(1, 5.0), task(2, 5.0), task(3, 5.0)] +
                    [task(i, 0.1) for i in range(4, 8)], OWNER)
    assert sent(d, A) == [1, 2]  # long: free cores only
    assert sent(core.finished(A, ok(1)), A) == [3, 4, 5]  # the last long one, then prefetch
    assert sent(core.finished(A, ok(2)), A) == [6]
