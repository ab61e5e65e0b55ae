"""Task resources in the pure scheduler core: cores, GPUs, memory, MPI ranks, exclusive,
end times, reservation and backfill, impossible requests (issue 11 item 4)."""

from __future__ import annotations

from shoal.head.core import SchedulerCore
from shoal.transport import protocol as P

A, B, C, OWNER = b"agent-a", b"agent-b", b"agent-c", b"client"
GIB = 2**30


def task(tid: int, cores: int = 1, **opts: object) -> list:
    return [tid, P.CMD, 0, b"", [], cores, -1, None, opts or None]


def sent(d, agent: bytes) -> list[int]:
    return [s[0] for s in d.dispatch.get(agent, [])]


def ok(*tids: int) -> list[list]:
    return [[t, P.OK, b"", None] for t in tids]


def errors(d) -> dict[int, str]:
    return {i[0]: bytes(i[2]).decode() for i in d.resolve.get(OWNER, []) if i[1] == P.ERR}


def test_task_larger_than_an_agent_but_within_its_window_goes_elsewhere():
    # the bug: a 3-core task fit the 2-core agent's prefetch window (4) and never ran there
    core = SchedulerCore()
    core.add_agent(A, 2)
    core.add_agent(B, 4)
    core.set_window(A, 4)
    d = core.submit([task(1, cores=3), task(2)], OWNER)
    assert sent(d, A) == [2] and not errors(d)
    d = core.set_window(B, 8)
    assert sent(d, B) == [1]


def test_gpu_tasks_go_only_where_a_gpu_is_free_and_never_more_than_it_has():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.add_agent(B, 4, gpus=2)
    core.set_window(A, 8)
    core.set_window(B, 8)
    d = core.submit([task(i, gpus=1) for i in range(1, 5)] + [task(5), task(6)], OWNER)
    assert sorted(sent(d, B)) == [1, 2]  # two GPUs: two GPU tasks, however wide the window
    assert 5 in sent(d, A) + sent(d, B) and 6 in sent(d, A) + sent(d, B)
    assert core.agents[B].gpus_used == 2
    d = core.finished(B, ok(1))
    assert sent(d, B) == [3] and core.agents[B].gpus_used == 2
    d = core.finished(B, ok(2, 3))
    assert sent(d, B) == [4]
    d = core.finished(B, ok(4))
    assert core.agents[B].gpus_used == 0 and not core.tasks.keys() - {5, 6}


def test_impossible_gpu_request_fails_at_once_naming_task_and_largest_agent():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.set_window(A, 8)
    d = core.submit([task(7, gpus=2), task(8)], OWNER)
    assert errors(d) == {7: "the task asks for 2 GPUs but the largest agent (agent-a) has 0 GPUs"}
    assert sent(d, A) == [8]
    d = core.submit([task(9, ranks=2, gpus=1)], OWNER)
    assert "the task asks for 1 GPU per rank" in errors(d)[9]


def test_with_no_agent_tasks_wait_and_fail_only_once_one_is_connected():
    core = SchedulerCore()
    d = core.submit([task(1, gpus=1), task(2, cores=8)], OWNER)
    assert not d.resolve and core.queued() == 2
    d = core.add_agent(A, 4)
    assert set(errors(d)) == {1, 2}
    assert "the task asks for 8 cores but the largest agent (agent-a) has 4" == errors(d)[2]


def test_bad_resource_options_fail_with_a_one_line_error():
    core = SchedulerCore()
    core.add_agent(A, 4)
    d = core.submit([task(1, gpus=-1), task(2, nodes=2), task(3, ranks=2, nodes=3),
                     task(4, cores=-2, gpus=1), task(5, exclusive="yes")], OWNER)
    errs = errors(d)
    assert errs[1] == "bad resource request: 'gpus' must be an integer >= 0, not -1"
    assert "give 'ranks' too" in errs[2] and "2 ranks cannot spread over 3 nodes" in errs[3]
    assert "cores must be an integer >= 1" in errs[4] and "'exclusive' must be" in errs[5]


def test_an_agent_leaving_fails_the_queued_tasks_only_it_could_run():
    core = SchedulerCore()
    core.add_agent(A, 4, gpus=1)
    core.add_agent(B, 4)
    core.set_window(A, 8)
    core.set_window(B, 8)
    d = core.submit([task(1, gpus=1), task(2, gpus=1), task(3)], OWNER)
    assert sent(d, A)[0] == 1 and 2 not in sent(d, A) + sent(d, B)
    d = core.remove_agent(A, "node died")
    errs = errors(d)  # 1 was lost (retried, but now impossible), 2 waited: both fail now
    assert set(errs) == {1, 2}
    assert errs[2] == "the task asks for 1 GPU but the largest agent (agent-b) has 0 GPUs"
    assert 3 in core.tasks  # the rest of the run goes on


def test_memory_is_counted_per_agent():
    core = SchedulerCore()
    core.add_agent(A, 8, memory=8 * GIB)
    core.set_window(A, 16)
    d = core.submit([task(i, memory=3 * GIB) for i in (1, 2, 3)], OWNER)
    assert sent(d, A) == [1, 2]
    d = core.finished(A, ok(1))
    assert sent(d, A) == [3]
    d = core.submit([task(4, memory=9 * GIB)], OWNER)
    assert "9.0 GiB of memory but the largest agent (agent-a) has 8.0 GiB" in errors(d)[4]


def test_plain_four_core_task_is_not_starved_by_a_stream_of_one_core_tasks():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.set_window(A, 8)  # prefetch 1
    d = core.submit([task(i) for i in range(1, 9)], OWNER)
    assert len(sent(d, A)) == 8
    core.submit([task(100, cores=4)], OWNER)
    nxt, order = 9, []
    for done in range(1, 9):  # the stream goes on: one new 1-core task per result
        core.submit([task(nxt)], OWNER)
        nxt += 1
        d = core.finished(A, ok(done))
        order += sent(d, A)
        if 100 in order:
            break
    assert order[0] == 100 and done <= 4  # sent once 4 cores' worth is free, before any later task


def test_large_shaped_task_reserves_an_agent_and_smaller_ones_backfill_elsewhere():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.add_agent(B, 2)
    core.set_window(A, 8)
    core.set_window(B, 4)
    core.submit([task(i) for i in range(1, 13)], OWNER)
    assert len(core.agents[A].running) == 8 and len(core.agents[B].running) == 4
    big = task(100, cores=4, timeout=600.0)  # shaped (a time limit): the reservation path
    core.submit([big] + [task(i) for i in range(13, 40)], OWNER)
    to_a, to_b = [], []
    a_left = sorted(core.agents[A].running)
    for tid in a_left[:4]:  # A finishes four: its reservation keeps them for the big one
        d = core.finished(A, ok(tid))
        to_a += sent(d, A)
        to_b += sent(d, B)
    for tid in sorted(core.agents[B].running)[:2]:  # B keeps taking small ones meanwhile
        d = core.finished(B, ok(tid))
        to_a += sent(d, A)
        to_b += sent(d, B)
    assert to_a == [100]
    assert to_b and all(t >= 13 for t in to_b)  # backfill on B, in order


def test_gpu_holder_keeps_its_gpu_but_lets_cores_backfill():
    core = SchedulerCore()
    core.add_agent(A, 8, gpus=1)
    core.set_window(A, 8)
    d = core.submit([task(1, gpus=1), task(2, gpus=1)] + [task(i) for i in range(3, 7)], OWNER)
    assert sent(d, A) == [1, 3, 4, 5, 6]  # 2 waits for the GPU; 1-core tasks use the cores
    assert core.resv_tid == 2 and core.agents[A].rv_gpus == 1
    d = core.finished(A, ok(1))
    assert sent(d, A) == [2] and core.resv_tid is None


def test_mpi_task_reserves_free_cores_on_fewest_agents_and_goes_to_its_leader():
    core = SchedulerCore()
    core.add_agent(A, 4, node="n1")
    core.add_agent(B, 4, node="n2")
    core.add_agent(C, 2, node="n3")
    for x in (A, B, C):
        core.set_window(x, 2 * core.agents[x].slots)
    d = core.submit([task(1, ranks=6)], OWNER)
    assert list(d.dispatch) == [A]
    spec = d.dispatch[A][0]
    assert spec[P.T_OPTS]["hosts"] == [["n1", 4, 1], ["n2", 2, 1]]
    assert core.agents[A].inflight == 4 and core.agents[B].held == 2
    # B runs only what the MPI ranks leave it (2 cores, no prefetch); C is untouched
    d = core.submit([task(i) for i in range(2, 12)], OWNER)
    assert len(sent(d, B)) == 2 and len(sent(d, C)) == 4 and len(sent(d, A)) == 4
    d = core.finished(A, [[1, P.OK, b"", 1, None]])
    assert d.resolve[OWNER][0][:2] == [1, P.OK]
    assert core.agents[B].held == 0 and core.agents[B].window == 8  # its prefetch is back


def test_mpi_nodes_spread_ranks_evenly_over_exactly_that_many_agents():
    core = SchedulerCore()
    for x, n in ((A, "n1"), (B, "n2"), (C, "n3")):
        core.add_agent(x, 4, node=n)
        core.set_window(x, 8)
    d = core.submit([task(1, cores=1, ranks=5, nodes=2)], OWNER)
    hosts = next(iter(d.dispatch.values()))[0][P.T_OPTS]["hosts"]
    assert [h[1:] for h in hosts] == [[3, 1], [2, 1]]
    d = core.submit([task(2, cores=2, ranks=3, nodes=3), task(3, ranks=4, nodes=4)], OWNER)
    errs = errors(d)
    assert set(errs) == {3} and "on 4 nodes; only 3 agents connected" in errs[3]
    d = core.submit([task(4, cores=4, ranks=4)], OWNER)
    assert "the task asks for 4 ranks of 4 cores; all 3 agents together hold 3" == errors(d)[4]


def test_mpi_task_waits_for_all_its_cores_at_once_without_partial_hold():
    core = SchedulerCore()
    core.add_agent(A, 4, node="n1")
    core.add_agent(B, 4, node="n2")
    core.set_window(A, 8)
    core.set_window(B, 8)
    core.submit([task(i) for i in range(1, 17)], OWNER)  # both full, prefetched
    d = core.submit([task(100, ranks=8)] + [task(i) for i in range(17, 30)], OWNER)
    assert not d.dispatch
    assert core.agents[A].held == 0 and core.agents[B].held == 0  # nothing held while waiting
    for tid in range(1, 17):
        agent = A if tid in core.agents[A].running else B
        d = core.finished(agent, ok(tid))
        dispatched = [s[0] for specs in d.dispatch.values() for s in specs]
        if dispatched:
            break
    assert tid == 16 and dispatched[0] == 100  # the reservation let nothing in before it
    a, b = core.agents[A], core.agents[B]
    leader, member = (a, b) if 100 in a.running else (b, a)
    assert member.held == 4 and not member.running  # 4 ranks on each, held at once
    # the member runs nothing besides the ranks; the leader (it knows) may prefetch behind them
    assert leader.held == 0 and leader.inflight <= leader.want


def test_losing_an_mpi_participant_loses_the_attempt_and_revokes_it_at_the_leader():
    core = SchedulerCore()
    core.add_agent(A, 4, num=1, node="n1")
    core.add_agent(B, 4, num=2, node="n2")
    core.set_window(A, 8)
    core.set_window(B, 8)
    d = core.submit([task(1, ranks=8)], OWNER)
    assert sent(d, A) == [1]
    d = core.remove_agent(B, "silent for 8 s")
    assert d.revoke == {A: [1]}
    assert core.agents[A].inflight == 0 and not core.agents[A].running
    # the attempt is lost; 8 ranks no longer fit the one agent left: the task fails, clearly
    tid, status, payload, _num, history = d.resolve[OWNER][0]
    assert (tid, status) == (1, P.ERR)
    assert payload == b"the task asks for 8 ranks of 1 core; all 1 agent together hold 4"
    assert history == ["attempt 1 on agent-b: agent agent-b was lost: silent for 8 s"]


def test_a_lost_mpi_attempt_is_retried_when_the_others_still_fit_it():
    core = SchedulerCore()
    for x, n in ((A, "n1"), (B, "n2"), (C, "n3")):
        core.add_agent(x, 4, node=n)
        core.set_window(x, 4)
    d = core.submit([task(1, ranks=6)], OWNER)
    (leader,) = d.dispatch
    member = next(x for x in (A, B, C) if core.agents[x].held)
    rest = next(x for x in (A, B, C) if x not in (leader, member))
    d = core.remove_agent(member, "node died")
    assert d.revoke == {leader: [1]} and not d.resolve
    assert core.tasks[1].crashes == 1 and core.tasks[1].spec[P.T_ATTEMPT] == 2
    hosts = core.tasks[1].spec[P.T_OPTS]["hosts"]
    assert sorted(h[1] for h in hosts) == [2, 4] and core.agents[rest].held + core.agents[
        leader].held in (2, 4)


def test_losing_the_mpi_leader_frees_the_other_shares():
    core = SchedulerCore()
    core.add_agent(A, 4, node="n1")
    core.add_agent(B, 4, node="n2")
    core.add_agent(C, 4, node="n3")
    for x in (A, B, C):
        core.set_window(x, 4)
    d = core.submit([task(1, ranks=8)], OWNER)
    leader = next(iter(d.dispatch))
    other = [x for x in (A, B, C) if core.agents[x].held][0]
    core.remove_agent(leader, "killed")
    assert core.agents[other].held == 0 or core.tasks[1].agent is not None  # freed, or re-placed
    spec_agent = core.tasks[1].agent
    assert spec_agent is not None and spec_agent != leader  # the retry runs on the two left


def test_exclusive_task_waits_for_an_empty_agent_and_keeps_it_empty():
    core = SchedulerCore()
    core.add_agent(A, 4)
    core.set_window(A, 8)
    core.submit([task(1), task(2)], OWNER)
    d = core.submit([task(3, exclusive=True), task(4)], OWNER)
    assert not d.dispatch  # 3 waits for A to empty; 4 waits behind it (A is reserved)
    d = core.finished(A, ok(1))
    assert not d.dispatch
    d = core.finished(A, ok(2))
    assert sent(d, A) == [3]
    d = core.submit([task(5)], OWNER)
    assert not d.dispatch and core.agents[A].credit <= 0
    d = core.finished(A, ok(3))
    assert sent(d, A) == [4, 5]


def test_task_with_a_time_limit_is_not_started_on_an_agent_ending_before_it():
    now = [1000.0]
    core = SchedulerCore(clock=lambda: now[0])
    core.add_agent(A, 4, end_time=1100.0)
    core.add_agent(B, 4, end_time=None)
    core.set_window(A, 8)
    d = core.submit([task(1, timeout=300.0), task(2, timeout=60.0)], OWNER)
    assert sent(d, A) == [2]  # 1 would outlive A's walltime
    d = core.set_window(B, 8)
    assert sent(d, B) == [1]
    now[0] = 1050.0
    d = core.submit([task(3, timeout=60.0)], OWNER)
    assert sent(d, B) == [3]


def test_paused_core_dispatches_nothing_until_resumed():
    core = SchedulerCore()
    core.paused = True
    core.add_agent(A, 2)
    core.set_window(A, 4)
    assert not core.submit([task(1), task(2)], OWNER).dispatch
    assert not core.submit([task(3), task(4)], OWNER, static=True).dispatch
    core.add_agent(B, 2)
    core.set_window(B, 4)
    d = core.resume()
    assert sorted(sent(d, A) + sent(d, B)) == [1, 2, 3, 4]
    assert sent(d, B)  # the static batch was split over both agents


def test_random_mixed_workload_never_oversubscribes_and_finishes_everything():
    # 400 tasks (MPI, GPU, exclusive, memory, multi-core) on 6 agents, random completions;
    # agents lost (twice) and leaving in order (once) mid-run, then joining again
    import random

    rnd = random.Random(5)
    core = SchedulerCore(crash_limit=100)
    names = [f"a{i}".encode() for i in range(6)]
    for i, name in enumerate(names):
        core.add_agent(name, 4, i + 1, gpus=2 * (i % 2), memory=8 * GIB, node=f"n{i}")
        core.set_window(name, 8)
    specs = []
    for tid in range(1, 401):
        r = rnd.random()
        opts: dict = {}
        if r < 0.1:
            opts = {"ranks": rnd.randint(2, 10)}
            if rnd.random() < 0.3:
                opts["nodes"] = rnd.randint(-(-opts["ranks"] // 4), min(3, opts["ranks"]))
        elif r < 0.25:
            opts = {"gpus": 1}
        elif r < 0.3:
            opts = {"exclusive": True}
        elif r < 0.4:
            opts = {"memory": 3 * GIB}
        cores = 1 if "ranks" in opts else rnd.choice((1, 1, 1, 2, 4))
        specs.append(task(tid, cores=cores, **opts))
    holding: dict[bytes, list[int]] = {n: [] for n in names}
    done: set[int] = set()

    def take(d) -> None:
        for name, out in d.dispatch.items():
            for spec in out:
                holding[name].append(spec[0])
                hosts = (spec[P.T_OPTS] or {}).get("hosts")
                if hosts:
                    assert sum(h[1] for h in hosts) == spec[P.T_OPTS]["ranks"]
                    assert len({h[0] for h in hosts}) == len(hosts)
                    if spec[P.T_OPTS].get("nodes"):
                        assert len(hosts) == spec[P.T_OPTS]["nodes"]
        for items in d.resolve.values():
            for item in items:
                assert item[1] == P.OK, bytes(item[2])
                done.add(item[0])
        for a in core.agents.values():
            assert a.gpus_used <= a.gpus and a.mem_used <= a.memory
            if a.held:
                assert a.inflight + a.held <= a.slots
            if a.excl:
                assert len(a.running) + len(a.holds) == 1

    for i in range(0, 400, 40):
        take(core.submit(specs[i:i + 40], OWNER))
    for rnd_i in range(5000):
        if len(done) == 400:
            break
        if rnd_i in (30, 60, 90):
            victim = names[rnd_i // 30]
            take(core.remove_agent(victim, "test", lost=rnd_i != 60))
            holding[victim] = []
            take(core.add_agent(victim, 4, 9, gpus=2 * ((rnd_i // 30) % 2), memory=8 * GIB))
            take(core.set_window(victim, 8))
        for name in names:
            mine = holding[name]
            if mine and rnd.random() < 0.5:
                k = rnd.randint(1, len(mine))
                rnd.shuffle(mine)
                fin, holding[name] = mine[:k], mine[k:]
                take(core.finished(name, ok(*fin)))
    assert len(done) == 400 and not core.tasks
    assert all(a.inflight == a.held == a.gpus_used == a.mem_used == 0 for a in core.agents.values())
