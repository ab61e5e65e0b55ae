"""Short commands travel in batches (issue 13): the agent's window covers ``CMD_QUEUE_S`` of
their work, and the spawn helper's reports wait for company while its queue is deep.

On a 2-core VM every message costs its receiver a wake-up that costs more CPU than the
message's Python work, so W2's throughput depends on how many commands a message carries.
"""

from __future__ import annotations

import os
import select
import time

from shoal.agent import spawner
from shoal.agent.commands import AHEAD_MAX, CMD_QUEUE_S, QUEUE_AHEAD_S, QUEUE_MAX, Commands


class _Books(Commands):
    """The command books of an agent with ``slots`` cores (no process behind them)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._init_commands(QUEUE_AHEAD_S)


def test_short_commands_get_a_window_of_their_work():
    a = _Books(2)
    a.cmd_mean = 0.001  # 1 ms commands on 2 cores: 40 ms of them is 80
    assert a._command_window() == int(2 * CMD_QUEUE_S / 0.001) == 80
    a.cmd_mean = 0.0012  # a little longer: not re-sent for so small a change
    assert a._command_window() == 80
    a.cmd_mean = 0.0045  # a quarter of the window is enough now: it shrinks
    assert a._command_window() == int(2 * CMD_QUEUE_S / 0.0045) == 17
    a.cmd_mean = 0.02  # not short any more: no extra window at all
    assert a._command_window() == 0
    wide = _Books(1024)
    wide.cmd_mean = 0.0001
    assert wide._command_window() == QUEUE_MAX
    assert AHEAD_MAX >= 80  # what the helper may hold covers the 2-core window


def test_the_helper_reports_a_deep_queue_in_batches():
    sp = spawner.Spawner()
    try:
        sp.config(dict(os.environ), None)
        sp.cap(2)
        n = 120
        for key in range(1, n + 1):
            sp.run(key, key, {"argv": ["/bin/true"], "stdout": "devnull", "stderr": "devnull"}, 1)
        assert sp.flush()
        messages: list[list[tuple]] = []
        got = 0
        deadline = time.monotonic() + 60
        while got < n:
            assert time.monotonic() < deadline, f"{got} of {n} reported"
            select.select([sp.fileno()], [], [], 0.5)
            while (msg := spawner._recv(sp.sock)) is not None:
                reports = spawner._decode(*msg)
                messages.append(reports)
                got += len(reports)
        assert sorted(r[0] for m in messages for r in m) == list(range(1, n + 1))
        assert all(r[1] == 0 for m in messages for r in m)
        # While the queue was deep, a report waited REPORT_DELAY_S for company: the exits
        # one message carries span about that long (with the 2 ms of before, ~2 ms and 5-7
        # commands; now ~20). Timed by the helper's own clock, so a slow test process does
        # not change it; the tail (the queue run low) goes as it comes and is left out.
        spans = sorted(max(r[3] for r in m) - min(r[3] for r in m)
                       for m in messages[: len(messages) // 2])
        assert spans and spans[len(spans) // 2] >= 0.004, (spans, [len(m) for m in messages])
        # How many exits that is depends on how fast /bin/true runs: ~20 a message on a
        # quiet machine, ~4 on one with more runnable processes than cores (then ~30
        # messages for the 120). One report a message would mean no batching at all.
        assert len(messages) <= n // 2, [len(m) for m in messages]
    finally:
        sp.close(5.0)
