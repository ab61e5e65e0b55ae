"""Attempts, retries, the crash limit, stale results, drain: the pure scheduler core."""

from __future__ import annotations

from shoal.head.core import SchedulerCore
from shoal.transport import protocol as P

A, B, OWNER = b"agent-a", b"agent-b", b"client"


def task(tid: int, opts: dict | None = None, deps: list[int] | None = None) -> list:
    return [tid, P.PY, 1, b"", deps or [], 1, -1, None, opts]


def two_agents(window: int = 1) -> SchedulerCore:
    core = SchedulerCore()
    core.add_agent(A, 1, num=1)
    core.add_agent(B, 1, num=2)
    core.set_window(A, window)
    core.set_window(B, window)
    return core


def err_info(name: str = "builtins.ValueError") -> dict:
    return {"why": "ValueError: bad", "types": [name, "builtins.Exception", "builtins.BaseException"]}


def test_dispatch_stamps_attempt_and_owner_number():
    core = SchedulerCore()
    core.add_agent(A, 1, num=7)
    core.set_window(A, 1)
    d = core.submit([task(1)], OWNER, owner_num=5)
    spec = d.dispatch[A][0]
    assert len(spec) == P.TASK_LEN
    assert spec[P.T_ATTEMPT] == 1 and spec[P.T_OWNER] == 5


def test_lost_agent_attempts_run_elsewhere_and_resolve_once():
    core = two_agents()
    d = core.submit([task(1), task(2)], OWNER)
    assert {s[0] for s in d.dispatch[A]} == {1} and {s[0] for s in d.dispatch[B]} == {2}
    d = core.remove_agent(A, "silent for 8 s")
    assert not d.resolve and not d.dispatch  # B is full: 1 waits at the front
    assert [t.tid for t in core.ready] == [1]
    d = core.finished(B, [[2, P.OK, b"two", 1, None]])
    assert d.resolve[OWNER] == [[2, P.OK, b"two", 2, None]]
    respec = d.dispatch[B][0]
    assert respec[0] == 1 and respec[P.T_ATTEMPT] == 2
    # the lost agent's late result of attempt 1 (it comes back) is dropped
    assert not core.finished(A, [[1, P.OK, b"stale", 1, None]]).resolve
    # so is a result for the right task with the wrong attempt number
    assert not core.finished(B, [[1, P.OK, b"stale", 1, None]]).resolve
    d = core.finished(B, [[1, P.OK, b"one", 2, None]])
    assert d.resolve[OWNER][0][:4] == [1, P.OK, b"one", 2]
    assert d.resolve[OWNER][0][4] == ["attempt 1 on agent-a: agent agent-a was lost: silent for 8 s"]
    assert not core.tasks


def test_crash_limit_fails_with_every_attempt_named():
    core = SchedulerCore(crash_limit=3)
    core.add_agent(A, 1, num=1)
    core.set_window(A, 1)
    core.submit([task(1, opts={"retries": 5})], OWNER)
    for attempt in (1, 2):
        d = core.finished(A, [[1, P.LOST, b"worker 0 was killed by signal 9", attempt, None]])
        assert not d.resolve
        assert d.dispatch[A][0][P.T_ATTEMPT] == attempt + 1  # lost: retried at once
    d = core.finished(A, [[1, P.LOST, b"worker 0 was killed by signal 9", 3, None]])
    tid, status, payload, _num, attempts = d.resolve[OWNER][0]
    assert (tid, status) == (1, P.LOST)
    assert b"3 times in a row" in payload and b"crash limit 3" in payload
    assert len(attempts) == 3 and attempts[2].startswith("attempt 3 on agent-a: worker 0")


def test_exception_is_not_retried_by_default():
    core = two_agents()
    core.submit([task(1)], OWNER)
    d = core.finished(A, [[1, P.ERR, b"\x80pickle", 1, err_info()]])
    assert d.resolve[OWNER][0][1] == P.ERR and d.resolve[OWNER][0][2] == b"\x80pickle"
    assert not d.later


def test_retries_back_off_then_requeue_and_resolve_with_history():
    core = two_agents()
    core.submit([task(1, opts={"retries": 2})], OWNER)
    d = core.finished(A, [[1, P.ERR, b"e1", 1, err_info()]])
    assert not d.resolve and not d.dispatch
    assert len(d.later) == 1 and d.later[0][1] == 1
    first_delay = d.later[0][0]
    d = core.requeue([1])
    agent = next(iter(d.dispatch))
    assert d.dispatch[agent][0][P.T_ATTEMPT] == 2
    d = core.finished(agent, [[1, P.ERR, b"e2", 2, err_info()]])
    assert d.later[0][0] > first_delay  # exponential backoff
    d = core.requeue([1])
    agent = next(iter(d.dispatch))
    d = core.finished(agent, [[1, P.ERR, b"e3", 3, err_info()]])
    tid, status, payload, _num, attempts = d.resolve[OWNER][0]
    assert (status, payload) == (P.ERR, b"e3")  # the last attempt's exception
    assert [a.split(":")[0] for a in attempts] == ["attempt 1 on agent-a", "attempt 2 on " + agent.decode(),
                                                   "attempt 3 on " + agent.decode()]


def test_retry_on_matches_the_exception_class_hierarchy():
    core = two_agents()
    core.submit([task(1, opts={"retries": 3, "retry_on": ["builtins.OSError"]}),
                 task(2, opts={"retries": 3, "retry_on": ["builtins.OSError"]})], OWNER)
    d = core.finished(A, [[1, P.ERR, b"x", 1, err_info("builtins.FileNotFoundError") | {
        "types": ["builtins.FileNotFoundError", "builtins.OSError", "builtins.Exception"]}]])
    assert d.later and not d.resolve
    d = core.finished(B, [[2, P.ERR, b"x", 1, err_info("builtins.KeyError")]])
    assert d.resolve[OWNER][0][:2] == [2, P.ERR]


def test_timeout_counts_as_a_failed_attempt():
    core = two_agents()
    core.submit([task(1, opts={"timeout": 1.0, "retries": 1}), task(2, opts={"timeout": 1.0})], OWNER)
    d = core.finished(A, [[1, P.TIMEOUT, b"timed out after 1 s", 1, None]])
    assert d.later
    d = core.finished(B, [[2, P.TIMEOUT, b"timed out after 1 s", 1, None]])
    assert d.resolve[OWNER][0][:3] == [2, P.TIMEOUT, b"timed out after 1 s"]
    assert d.resolve[OWNER][0][4] == ["attempt 1 on agent-b: timed out after 1 s"]


def test_command_exit_status_is_retried_only_with_retries():
    core = two_agents()
    core.submit([task(1, opts={"retries": 1}), task(2)], OWNER)
    exit3 = {"why": "exit status 3", "exit": 3}
    d = core.finished(A, [[1, P.OK, b"res", 1, exit3]])
    assert d.later and not d.resolve
    d = core.finished(B, [[2, P.OK, b"res", 1, exit3]])
    assert d.resolve[OWNER][0][:2] == [2, P.OK]
    core.requeue([1])
    agent = next(a for a, st in core.agents.items() if 1 in st.running)
    d = core.finished(agent, [[1, P.OK, b"res2", 2, exit3]])
    assert d.resolve[OWNER][0][:3] == [1, P.OK, b"res2"]  # out of retries: the result as is


def test_cancelled_during_backoff_is_not_requeued():
    core = two_agents()
    core.submit([task(1, opts={"retries": 1})], OWNER)
    core.finished(A, [[1, P.ERR, b"x", 1, err_info()]])
    done, _ = core.cancel([1], OWNER)
    assert done == [1]
    assert not core.requeue([1]).dispatch


def test_failed_retried_task_fails_its_dependents_only_at_the_end():
    core = two_agents()
    core.submit([task(1, opts={"retries": 1}), task(2, deps=[1])], OWNER)
    d = core.finished(A, [[1, P.ERR, b"x", 1, err_info()]])
    assert not d.resolve  # 2 still waits
    d = core.requeue([1])
    agent = next(iter(d.dispatch))
    d = core.finished(agent, [[1, P.OK, b"ok", 2, None]])
    assert d.resolve[OWNER] == [[1, P.OK, b"ok", core.agents[agent].num, ["attempt 1 on agent-a: ValueError: bad"]]]
    assert any(s[0] == 2 for specs in d.dispatch.values() for s in specs)


def test_drain_and_returned_tasks_requeue_without_counting():
    core = SchedulerCore()
    core.add_agent(A, 2, num=1)
    core.set_window(A, 4)
    core.submit([task(i) for i in range(1, 5)], OWNER)
    assert len(core.agents[A].running) == 4
    core.drain(A)
    core.add_agent(B, 2, num=2)
    d = core.set_window(B, 2)
    assert not d.dispatch  # nothing queued: all four are on A
    d = core.returned(A, [3, 4])  # A hands back its two unstarted tasks
    assert [s[0] for s in d.dispatch[B]] == [3, 4]
    d = core.set_window(A, 10)  # a draining agent gets nothing more
    assert not d.dispatch
    d = core.finished(A, [[1, P.OK, b"", 1, None], [2, P.OK, b"", 1, None]])
    assert len(d.resolve[OWNER]) == 2 and A not in d.dispatch
    d = core.remove_agent(A, "drained", lost=False)
    assert not d.resolve
    assert core.agents[B].running == {3, 4}
    assert core.tasks[3].crashes == 0 and core.tasks[3].history is None


def test_agent_that_left_in_order_has_its_running_tasks_requeued_uncounted():
    core = two_agents()
    core.submit([task(1), task(2)], OWNER)
    d = core.remove_agent(A, "shutdown", lost=False)
    assert not d.resolve
    d = core.finished(B, [[2, P.OK, b"", 1, None]])
    assert d.dispatch[B][0][0] == 1
    assert core.tasks[1].crashes == 0


def test_client_loss_stops_its_tasks_and_its_trees_subtasks():
    core = two_agents(window=2)
    core.submit([task(1), task(2), task(3)], OWNER, owner_num=4)
    # a sub-task submitted by agent A's worker on behalf of client 4
    sub = task(99)
    sub += [None, 4]
    core.submit([sub], A)
    d = core.cancel_owner(OWNER, 4)
    revoked = sorted(t for tids in d.revoke.values() for t in tids)
    assert revoked == [1, 2, 3, 99]
    assert not core.tasks and not core.agents[A].running and not core.agents[B].running


def test_done_keys_only_for_ok_results_with_a_key():
    core = two_agents()
    core.submit([task(1), task(2), task(3)], OWNER, keys=["k1", "k2", None])
    d = core.finished(A, [[1, P.OK, b"r1", 1, None]])
    assert d.done_keys == [("k1", P.OK, b"r1")]
    d = core.finished(B, [[2, P.ERR, b"e", 1, err_info()]])
    assert d.done_keys == []
    d = core.finished(A, [[3, P.OK, b"r3", 1, None]])
    assert d.done_keys == []  # no key: not journaled


def test_slots_freed_by_a_lost_client_go_to_the_others_queued_tasks():
    core = SchedulerCore()
    core.add_agent(A, 2, num=1)
    core.set_window(A, 2)
    core.submit([task(1), task(2)], OWNER, owner_num=4)
    core.submit([task(3), task(4)], b"other", owner_num=5)
    assert core.agents[A].running == {1, 2}
    d = core.cancel_owner(OWNER, 4)
    assert sorted(d.revoke[A]) == [1, 2]
    assert sorted(s[0] for s in d.dispatch[A]) == [3, 4]


def test_hard_placed_task_for_an_agent_that_left_is_lost_not_misaddressed():
    core = SchedulerCore()
    core.add_agent(A, 1, num=1)
    core.add_agent(B, 1, num=2)
    core.drain(B)
    hard_b = task(1)
    hard_b[P.T_PLACE] = [B, True]
    d = core.submit([hard_b], OWNER)
    assert d.resolve[OWNER][0][:2] == [1, P.LOST] and b"is leaving" in d.resolve[OWNER][0][2]
    core.remove_agent(B, "drained", lost=False)
    again = task(2)
    again[P.T_PLACE] = [B, True]
    d = core.submit([again], OWNER)
    assert d.resolve[OWNER][0][:2] == [2, P.LOST] and b"left: drained" in d.resolve[OWNER][0][2]
    nowhere = task(3)
    nowhere[P.T_PLACE] = [b"nobody", True]
    d = core.submit([nowhere], OWNER)
    assert d.resolve[OWNER][0][:2] == [3, P.ERR]
