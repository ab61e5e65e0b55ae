"""The simulator (shoal.sim): hand-computable runs, the agent's batching, the trace it
writes, a big/small mix, the workload files; and the core's refill of one agent."""

from __future__ import annotations

import json
import os

import pytest

from shoal import sim, trace
from shoal.cli.main import main
from shoal.head.core import SchedulerCore
from shoal.transport import protocol as P

WORKLOADS = os.path.join(os.path.dirname(__file__), "..", "bench", "sim", "workloads")


def wl(tasks: list[dict], agents: int = 4, cores: int = 2, gpus: int = 0, **head: object) -> sim.Workload:
    head = {"cost": "zero", "latency_s": 0.0, **head}
    return sim.parse({"order": "in-order", "agents": {"count": agents, "cores": cores, "gpus": gpus},
                      "head": head, "tasks": tasks})


def test_four_agents_of_two_cores_run_sixteen_one_second_tasks_in_two_seconds():
    for prefetch in (0, 1):
        r = sim.simulate(wl([{"count": 16, "duration_s": 1.0}], prefetch=prefetch))
        assert (r.ok, r.failed, r.unfinished) == (16, 0, 0)
        assert r.makespan_s == pytest.approx(2.0)
        assert r.core_util == pytest.approx(1.0)
        assert r.busy_core_s == pytest.approx(16.0)


def test_prefetch_hides_the_round_trip_and_latency_counts_both_ways():
    # latency 0.1 s: TASKS arrive at 0.1; with prefetch the second round waits at the agent
    # (ends 2.1); without it the results go back (1.2), the head answers (arrives 1.3)
    r1 = sim.simulate(wl([{"count": 16, "duration_s": 1.0}], prefetch=1, latency_s=0.1))
    r0 = sim.simulate(wl([{"count": 16, "duration_s": 1.0}], prefetch=0, latency_s=0.1))
    assert r1.makespan_s == pytest.approx(2.1)
    assert r0.makespan_s == pytest.approx(2.3)
    assert r0.core_util == pytest.approx(16 / (8 * 2.3))


def test_results_travel_in_the_agents_batches_or_one_by_one():
    # one agent, three tasks ending at 1.0, 1.001 and 1.0015: the first result goes at once
    # (a quiet spell), the other two wait for the 2 ms to pass and travel together
    tasks = [{"count": 1, "duration_s": d} for d in (1.0, 1.001, 1.0015)]
    assert sim.simulate(wl(tasks, agents=1, cores=3)).results_msgs == 2
    assert sim.simulate(wl(tasks, agents=1, cores=3, results="single")).results_msgs == 3
    # four ending at once: one message
    assert sim.simulate(wl([{"count": 4, "duration_s": 1.0}], agents=1, cores=4)).results_msgs == 1


def test_measured_head_cost_is_real_cpu_time_and_only_delays():
    w = wl([{"count": 2000, "duration_s": [0.001, 0.01]}], agents=8, cores=4, results="single")
    ideal = sim.simulate(w)
    real = sim.simulate(w.with_(cost="measured"))
    assert real.head_cpu_s > 0 and real.decisions == 2000
    assert real.decisions_per_cpu_s == pytest.approx(2000 / real.head_cpu_s)
    assert real.makespan_s > ideal.makespan_s  # the head's turns took time
    assert real.busy_core_s == pytest.approx(ideal.busy_core_s)  # same work either way


def test_gpus_and_mpi_tasks_hold_what_they_ask():
    # 1 agent, 8 cores, 2 GPUs; 4 one-GPU tasks of 1 s: two at a time -> 2 s
    r = sim.simulate(wl([{"count": 4, "gpus": 1, "duration_s": 1.0}], agents=1, cores=8, gpus=2))
    assert r.makespan_s == pytest.approx(2.0) and r.gpu_util == pytest.approx(1.0)
    # MPI: 2 ranks x 4 cores over 2 agents of 4 cores, twice: 2 s, every core busy
    r = sim.simulate(wl([{"count": 2, "ranks": 2, "nodes": 2, "cores": 4, "duration_s": 1.0}],
                        agents=2, cores=4))
    assert r.ok == 2 and r.makespan_s == pytest.approx(2.0)
    assert r.busy_core_s == pytest.approx(16.0)


def test_impossible_requests_fail_and_are_counted():
    r = sim.simulate(wl([{"count": 3, "cores": 3}, {"count": 4, "duration_s": 1.0}], cores=2))
    assert (r.failed, r.ok, r.unfinished) == (3, 4, 0)


def test_the_trace_reads_back_with_virtual_times(tmp_path):
    path = tmp_path / "sim.trace"
    r = sim.simulate(wl([{"count": 16, "duration_s": 1.0}], latency_s=0.01), trace=str(path))
    t = trace.read(path)
    assert t.header.get("simulated") is True
    epoch = t.header["epoch"]
    assert len(t.attempts) == 16 and {a.status for a in t.attempts} == {"ok"}
    assert len(t.agents) == 4 and {a.slots for a in t.agents} == {2}
    assert min(a.started for a in t.attempts) - epoch == pytest.approx(0.01)
    assert max(a.ended for a in t.attempts) - epoch == pytest.approx(r.makespan_s)
    s = trace.summary(path)
    assert s["ok"] == 16 and s["cores"]["busy_core_s"] == pytest.approx(16.0)
    assert main(["trace", str(path)]) == 0  # the commands read it as a head's
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").stat().st_size > 0


def test_a_big_task_behind_small_ones_is_not_starved():
    # 2 agents x 8 cores; 40 one-core tasks of 1 s, then two 8-core tasks, then 40 more
    tasks = [{"count": 40, "duration_s": 1.0}, {"count": 2, "cores": 8, "duration_s": 1.0},
             {"count": 40, "duration_s": 1.0}]
    for policy, prefetch in (("fifo", 1), ("fifo", 0), ("big-first", 1)):
        r = sim.simulate(wl(tasks, agents=2, cores=8, prefetch=prefetch, policy=policy))
        assert (r.ok, r.unfinished) == (82, 0)
        # 96 core-seconds on 16 cores: 6 s at best; nothing waits more than a round behind
        assert r.makespan_s <= 7.0 + 1e-9, (policy, prefetch, r.makespan_s)


def test_big_first_starts_big_tasks_before_older_small_ones(tmp_path):
    tasks = [{"count": 40, "duration_s": 1.0},
             {"count": 2, "cores": 8, "gpus": 1, "duration_s": 3.0}]
    starts = {}
    for policy in ("fifo", "big-first"):
        path = tmp_path / f"{policy}.trace"
        sim.simulate(wl(tasks, agents=2, cores=8, gpus=1, prefetch=0, policy=policy),
                     trace=str(path))
        t = trace.read(path)
        starts[policy] = max(a.started - t.header["epoch"] for a in t.attempts if a.cores == 8)
    assert starts["big-first"] == pytest.approx(0.0)
    assert starts["fifo"] >= 2.0  # behind 40 one-core tasks on 16 cores


def test_workload_files_parse_and_bad_keys_are_named(tmp_path):
    names = sorted(f for f in os.listdir(WORKLOADS) if f.endswith(".toml"))
    assert {"rp-256.toml", "rp-2048.toml", "million.toml", "weak-scaling.toml"} <= set(names)
    for name in names:
        w = sim.load(os.path.join(WORKLOADS, name))
        assert w.groups and w.agents >= 1
    assert sim.load(os.path.join(WORKLOADS, "weak-scaling.toml")).sweep[-1] == 1024
    bad = tmp_path / "bad.toml"
    bad.write_text('[agents]\ncount = 2\n[head]\nprefetch = -1\n[[tasks]]\ncount = 1\n')
    with pytest.raises(sim.WorkloadError, match=r"bad.toml: head.prefetch: expected an integer >= 0"):
        sim.load(bad)
    bad.write_text('[[tasks]]\ncount = 1\ncolor = "red"\n')
    with pytest.raises(sim.WorkloadError, match=r"tasks #1: unknown key 'color'"):
        sim.load(bad)
    bad.write_text('[[tasks]]\ncores = [4, 2]\ncount = 1\n')
    with pytest.raises(sim.WorkloadError, match=r"tasks #1.cores: expected an integer or \[low, high\]"):
        sim.load(bad)
    js = tmp_path / "w.json"
    js.write_text(json.dumps({"agents": {"count": 2}, "tasks": [{"count": 2}]}))
    assert sim.load(js).agents == 2


def test_shoal_sim_command_prints_json_and_sweeps(capsys, tmp_path):
    path = os.path.join(WORKLOADS, "tiny.toml")
    assert main(["sim", path, "--json", "--agents", "4", "--agents", "8"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["agents"] for r in rows] == [4, 8]
    assert rows[0]["makespan_s"] == pytest.approx(2.0) and rows[1]["makespan_s"] == pytest.approx(1.0)
    assert main(["sim", str(tmp_path / "missing.toml")]) == 2
    assert "cannot read workload" in capsys.readouterr().err
    assert main(["sim", path, "--trace", str(tmp_path / "t"), "--agents", "1", "--agents", "2"]) == 2
    assert main(["sim", path, "--trace", str(tmp_path)]) == 1  # a directory: one line
    assert "a directory, not a file" in capsys.readouterr().err


def test_a_result_refills_the_agent_that_freed_credit_most_credit_first():
    core = SchedulerCore()
    names = [f"a{i}".encode() for i in range(50)]
    for i, n in enumerate(names):
        core.add_agent(n, 2, i + 1)
        core.set_window(n, 2)
    d = core.submit([[t, P.CMD, 0, b"", [], 1, -1] for t in range(1, 201)], b"c")
    assert all(len(d.dispatch[n]) == 2 for n in names)  # 100 sent, 100 queued
    d = core.finished(names[7], [[d.dispatch[names[7]][0][0], P.OK, b"", None]])
    assert list(d.dispatch) == [names[7]] and [s[0] for s in d.dispatch[names[7]]] == [101]
    # a burst smaller than the windows spreads over free cores before any prefetch
    core = SchedulerCore()
    for i, n in enumerate(names):
        core.add_agent(n, 2, i + 1)
        core.set_window(n, 4)  # prefetch 1
    d = core.submit([[t, P.CMD, 0, b"", [], 1, -1] for t in range(1, 121)], b"c")
    got = sorted(len(d.dispatch.get(n, [])) for n in names)
    assert got == [2] * 40 + [4] * 10  # 100 on free cores, then 20 prefetched


def test_results_held_back_by_the_agent_always_leave():
    # the agent's flush was due at results_sent + 2 ms, and at that instant t - results_sent
    # could round below 2 ms: the results then stayed at the agent for good
    w = sim.parse({"order": "shuffle", "agents": {"count": 4, "cores": 8},
                   "head": {"cost": "zero", "latency_s": 0.0005, "prefetch": 1},
                   "tasks": [{"count": 6000, "cores": [1, 4], "duration_s": [0.005, 0.015]}]})
    for policy in ("fifo", "big-first"):
        r = sim.simulate(w.with_(policy=policy))
        assert (r.ok, r.unfinished) == (6000, 0), policy


def test_stated_estimates_order_longest_first_and_the_true_durations_run():
    tasks = [{"count": 96, "duration_s": [1.0, 10.0]}]
    base = sim.simulate(wl(tasks, agents=4, cores=4, prefetch=0))
    est = sim.simulate(wl([{**tasks[0], "estimate": True}], agents=4, cores=4, prefetch=0))
    off = sim.simulate(wl([{**tasks[0], "estimate": True, "estimate_error": 0.3}],
                          agents=4, cores=4, prefetch=0))
    for r in (est, off):
        assert (r.ok, r.unfinished) == (96, 0)
        assert r.busy_core_s == pytest.approx(base.busy_core_s)  # the same tasks ran
    # LPT: the tail is the shortest tasks; within 10% of the bound, and better than FIFO
    assert est.makespan_s < base.makespan_s
    assert est.makespan_s <= 1.1 * est.bound_s
    assert off.makespan_s < base.makespan_s
    with pytest.raises(sim.WorkloadError, match=r"tasks #1.estimate: expected true or false"):
        wl([{**tasks[0], "estimate": "yes"}])


@pytest.mark.parametrize("cap", [100, 10**9])
def test_a_huge_submission_starts_running_before_it_is_all_read(monkeypatch, tmp_path, cap):
    """The head's turn ends once TURN_TASKS submitted tasks wait (here 100; 50,000 in a run):
    what is read is placed and starts, the rest is read on the next turn. Without the cap the
    two long tasks, submitted last, would start first (longest first over the whole turn)."""
    from shoal.sim import engine

    monkeypatch.setattr(engine, "TURN_TASKS", cap)
    w = sim.parse({"order": "in-order", "agents": {"count": 1, "cores": 2},
                   "head": {"cost": "zero", "latency_s": 0.0, "prefetch": 0},
                   "client": {"submit_batch": 50},
                   "tasks": [{"count": 200, "duration_s": 1.0, "estimate": True},
                             {"count": 2, "duration_s": 100.0, "estimate": True}]})
    path = tmp_path / "sim.trace"
    r = sim.simulate(w, trace=str(path))
    assert (r.ok, r.unfinished) == (202, 0)
    t = trace.read(path)
    long_starts = sorted(a.started - t.header["epoch"] for a in t.attempts if a.ended - a.started > 50)
    # capped: the first turn read 100 short tasks and ran two; the long ones, read on the
    # next turn, go first after them (longest first over what is queued)
    assert long_starts == pytest.approx([1.0, 1.0] if cap == 100 else [0.0, 0.0])


# ---- planning against estimates (SchedulerCore(plan=True), shoal.head.planning) -----------
LPT_LOSES = [7.0, 7.0, 6.0, 5.0, 5.0, 4.0, 3.0, 3.0, 2.0]  # 42 core-s on 4 cores: >= 10.5 s


def _lpt_case(policy: str) -> sim.SimResult:
    groups = [{"count": 1, "duration_s": d, "estimate": True} for d in LPT_LOSES]
    return sim.simulate(wl(groups, agents=1, cores=4, prefetch=0, policy=policy))


def test_a_plan_in_time_beats_longest_first_where_the_greedy_order_loses():
    # Longest first (the core's order for estimated tasks): 7, 7, 6, 5 start; as cores free,
    # the longest left: 5 at 5 (ends 10), 4 at 6 (10), 3 and 3 at 7 (10): the 2 s task is
    # alone from 10 to 12. The plan packs to the shortest horizon that holds everything,
    # 11: 2+4+5, 3+7, 3+7, 5+6.
    for policy in ("fifo", "big-first"):
        r = _lpt_case(policy)
        assert r.ok == 9 and r.makespan_s == pytest.approx(12.0)
    r = _lpt_case("plan")
    assert (r.ok, r.failed, r.unfinished) == (9, 0, 0)
    assert r.makespan_s == pytest.approx(11.0)
    assert r.busy_core_s == pytest.approx(42.0)


def test_a_plan_is_given_up_when_the_estimates_miss_and_every_task_still_runs():
    groups = [{"count": 400, "duration_s": [1.0, 2.0], "estimate": True, "estimate_error": 0.5}]
    s = sim.Simulator(wl(groups, agents=4, cores=4, prefetch=0, policy="plan"))
    r = s.run()
    assert (r.ok, r.failed, r.unfinished) == (400, 0, 0)
    assert s.core.plan_runs == 1 and s.core.plan_dropped is not None
    exact = sim.Simulator(wl([{**groups[0], "estimate_error": 0.0}], agents=4, cores=4,
                             prefetch=0, policy="plan"))
    r = exact.run()
    assert r.ok == 400 and exact.core.plan_dropped is None
    assert r.core_util > 0.97


def test_planned_tasks_survive_an_agent_leaving_and_tasks_without_estimates_still_run():
    core = SchedulerCore(plan=True, big_first=True)
    a, b, owner = b"a", b"b", b"client"
    for name in (a, b):
        core.add_agent(name, 2)
        core.set_window(name, 2)

    def spec(tid: int, est: float | None) -> list:
        return [tid, P.CMD, 0, b"", [], 1, -1, None, {"estimate": est} if est else None]

    d = core.submit([spec(i, float(i)) for i in range(1, 9)] + [spec(9, None)], owner)
    assert core.plan_runs == 1
    running = {name: [s[0] for s in d.dispatch.get(name, [])] for name in (a, b)}
    assert sum(len(x) for x in running.values()) == 4  # every core, no prefetch
    d = core.remove_agent(b, "gone", lost=False)  # its tasks come back and are planned again
    done: list[int] = []
    todo = [s[0] for s in d.dispatch.get(a, [])] + running[a]
    while todo:
        tid = todo.pop(0)
        done.append(tid)
        todo += [s[0] for s in core.finished(a, [[tid, P.OK, b"", None]]).dispatch.get(a, [])]
    assert sorted(done) == list(range(1, 10))
    assert core.queued() == 0 and not core.tasks


def test_planned_tasks_can_be_cancelled_before_they_are_sent():
    core = SchedulerCore(plan=True)
    core.add_agent(b"a", 1)
    core.set_window(b"a", 1)
    specs = [[tid, P.CMD, 0, b"", [], 1, -1, None, {"estimate": float(tid)}] for tid in (1, 2, 3)]
    d = core.submit(specs, b"client")
    assert [s[0] for s in d.dispatch[b"a"]] == [3]  # the plan: 3, then 2, then 1
    assert core.queued() == 2
    done, _ = core.cancel([2], b"client")
    assert done == [2]
    d = core.finished(b"a", [[3, P.OK, b"", None]])
    assert [s[0] for s in d.dispatch[b"a"]] == [1]
    core.finished(b"a", [[1, P.OK, b"", None]])
    assert core.queued() == 0 and not core.tasks


def test_an_agent_that_joins_gets_planned_work_and_one_that_drains_gives_its_plan_back():
    now = [0.0]
    core = SchedulerCore(plan=True, clock=lambda: now[0])
    core.add_agent(b"a", 1)
    core.set_window(b"a", 1)
    specs = [[tid, P.CMD, 0, b"", [], 1, -1, None, {"estimate": 10.0}] for tid in range(1, 7)]
    d = core.submit(specs, b"client")
    assert len(d.dispatch[b"a"]) == 1 and core.queued() == 5  # all planned on "a"
    first = d.dispatch[b"a"][0][0]
    core.add_agent(b"b", 1)
    now[0] = 0.5  # within a second of the plan: "b" waits for the next turn that may plan
    assert not core.set_window(b"b", 1).dispatch
    now[0] = 1.5
    d = core.finished(b"a", [[first, P.OK, b"", None]])  # a turn: the plan is remade with "b"
    assert sorted(d.dispatch) == [b"a", b"b"] and core.plan_runs == 2
    d = core.drain(b"b")  # its planned tasks go back to "a" at once
    assert core.plan_runs == 3
    left = [s[0] for s in d.dispatch.get(b"a", [])]
    assert core.queued() == 6 - 3 - len(left)


@pytest.mark.parametrize("batch", [5, 40])
def test_a_planning_head_plans_a_whole_submission_once(monkeypatch, batch):
    # the turn's cap on submitted tasks (core.TURN_TASKS, here 10) does not cut a planning
    # head's turn: 40 tasks in SUBMITs of 5 (or one of 40) make one plan, and all run
    import shoal.sim.engine as engine

    monkeypatch.setattr(engine, "TURN_TASKS", 10)
    groups = [{"count": 40, "duration_s": [1.0, 3.0], "estimate": True}]
    w = wl(groups, agents=2, cores=4, prefetch=0, policy="plan").with_(submit_batch=batch)
    s = sim.Simulator(w)
    r = s.run()
    assert (r.ok, r.unfinished) == (40, 0)
    assert s.core.plan_runs == 1
