"""The figures of ``agentgw bench cluster`` from known times and CPU counts."""

from __future__ import annotations

import os

import pytest

from gateway.bench.cluster_bench import failover_gaps
from gateway.bench.cluster_cpu import CpuSeconds, ceiling_turns_per_s, cpu_report
from gateway.bench.proc_cpu import (
    cpu_seconds,
    machine_busy_seconds,
    thread_cpu_seconds,
    tree_cpu_seconds,
)


def test_failover_is_the_longest_gap_across_the_kill_of_the_victims_conversations() -> None:
    replies = {
        # The victim's: answered at 1 and 2, killed at 2.5, answered again at 9.
        "a": [1.0, 2.0, 9.0],
        # The victim's, its turn waiting in line since 0.5 (its first reply): 0.5 -> 6.
        "b": [0.5, 6.0],
        # Another process's: a slow turn before the kill counts as a steady gap only.
        "c": [2.4, 4.0],
        # The victim's, done before the kill: no gap across it.
        "d": [0.2, 0.3, 0.4],
    }
    gaps = failover_gaps(replies, {"a", "b", "d"}, turns=3, started=0.0, killed_at=2.5)
    assert gaps["failover_seconds"] == 7.0  # a: 2 -> 9, not b's 5.5 nor c's 2.4
    assert gaps["kill_to_answer_s"] == 6.5  # a: 2.5 -> 9
    # Gaps ending before the kill: a 1, 1; b 0.5; c 2.4; d 0.2, 0.1, 0.1.
    assert gaps["steady_gap_max_s"] == 2.4
    assert gaps["victim_conversations"] == 3


def test_a_victims_conversation_never_answered_again_has_no_failover_figure() -> None:
    replies = {"a": [1.0], "b": [1.0, 4.0]}
    gaps = failover_gaps(replies, {"a", "b"}, turns=2, started=0.0, killed_at=2.0)
    assert gaps["failover_seconds"] is None
    assert gaps["kill_to_answer_s"] is None


def test_cpu_report_is_per_turn_and_per_core_with_the_rest_as_other_work() -> None:
    used = CpuSeconds(gateways=(3.0, 1.0), loops=(2.0, 0.5), postgres=1.0, client=0.5, machine=7.5)
    report = cpu_report(used, turns=100, wall_s=5.0)
    assert report["cpu_ms_per_turn"] == {
        "gateways": [30.0, 10.0],
        "gateway_loops": [20.0, 5.0],
        "postgres": 10.0,
        "client": 5.0,
        "total": 55.0,
    }
    assert report["cores_busy"]["gateways"] == [0.6, 0.2]
    assert report["cores_busy"]["total"] == 1.1
    assert report["cores_busy"]["other"] == pytest.approx(0.4)  # 7.5 - 5.5 over 5 s


def test_cpu_seconds_grow_and_a_tree_counts_at_least_its_root() -> None:
    pid = os.getpid()
    before = CpuSeconds(
        (cpu_seconds(pid),), (thread_cpu_seconds(pid, pid),), 0.0, 0.0, machine_busy_seconds()
    )
    total = sum(i * i for i in range(300_000))  # burn a little CPU
    assert total > 0
    after = CpuSeconds(
        (cpu_seconds(pid),), (thread_cpu_seconds(pid, pid),), 0.0, 0.0, machine_busy_seconds()
    )
    used = after - before
    assert used.gateways[0] >= 0
    # The machine counts our CPU too; one thread counts at most the process's (the
    # kernel's per-CPU and per-task counts are sampled apart: a few ticks of slack).
    assert used.machine >= used.gateways[0] - 0.05
    assert used.loops[0] <= used.gateways[0] + 0.05
    own = cpu_seconds(pid)  # read first: the tree, read after, counts at least this
    assert tree_cpu_seconds(pid) >= own


def test_the_ceiling_is_the_cores_or_the_busiest_event_loop_whichever_binds_first() -> None:
    # 100 turns: 8 s of CPU in all (80 ms a turn: 25 turns/s on 2 cores), the one
    # loop 5 s (50 ms a turn: one core gives 20 turns/s): the loop binds.
    one = CpuSeconds(gateways=(6.0,), loops=(5.0,), postgres=1.5, client=0.5, machine=9.0)
    assert ceiling_turns_per_s(one, 100, cores=2) == 20.0
    # Two processes, each loop 2.6 s (38.5 turns/s), 8.4 s in all: the cores bind.
    two = CpuSeconds(gateways=(3.2, 3.2), loops=(2.6, 2.6), postgres=1.5, client=0.5, machine=9)
    assert ceiling_turns_per_s(two, 100, cores=2) == pytest.approx(200 / 8.4)
