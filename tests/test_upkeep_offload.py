"""Where the upkeep jobs' CPU-bound steps run (memory/jobs/offload.py, issue 21): in a
process of the run's own, or a worker thread; the process goes with the run, and with
a serving process killed with -9; a step's error comes back, a dead child fails the
run."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from memory.errors import JobProcessFailed
from memory.jobs import merge_plan
from memory.jobs.offload import CpuWork
from memory.types import ItemType


def _pid() -> int:
    return os.getpid()


def _pid_after(seconds: float) -> int:
    import time

    time.sleep(seconds)
    return os.getpid()


def _fails(message: str) -> None:
    raise ValueError(message)


def _dies() -> None:
    os._exit(3)


def _imported(name: str) -> bool:
    return name in sys.modules


def _pools() -> list[tuple[str, int]]:
    """The numeric libraries' thread pools once the tree's clustering is loaded."""
    import sklearn.mixture  # noqa: F401  (loads OpenMP and scipy's BLAS)
    from threadpoolctl import threadpool_info

    return [(str(pool["internal_api"]), int(pool["num_threads"])) for pool in threadpool_info()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _gone(pid: int, within_s: float = 60.0) -> bool:
    """Whether ``pid`` ends within ``within_s`` (a liveness bound, not a timing)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while loop.time() < deadline:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.1)
    return False


async def test_the_process_kind_runs_steps_in_a_child_that_ends_with_the_run() -> None:
    async with CpuWork("process") as cpu:
        first = await cpu.run(_pid)
        second = await cpu.run(_pid)
        assert first != os.getpid()
        # One child for the run, not one per step.
        assert second == first
        assert cpu.calls == 2
        assert cpu.pid == first
        assert _alive(first)
        # The child imports what its steps need, not the gateway.
        assert not await cpu.run(_imported, "gateway.app")
        assert not await cpu.run(_imported, "memory.service")
    assert await _gone(first)
    with pytest.raises(RuntimeError, match="closed"):
        await cpu.run(_pid)


async def test_the_child_s_numeric_libraries_run_on_one_thread() -> None:
    # With a thread per core they spin on every core between calls: the 100k
    # nightly's tree plan took 3.6 times the CPU (docs/DESIGN.md).
    async with CpuWork("process") as cpu:
        pools = await cpu.run(_pools)
    assert {"openblas", "openmp"} <= {api for api, _ in pools}
    assert all(threads == 1 for _, threads in pools), pools


def _scheduling() -> tuple[int, int]:
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux's idle class")
async def test_the_child_runs_in_the_idle_class_below_the_serving_process() -> None:
    # The packs come first: the child gets a core only when nothing else wants it.
    async with CpuWork("process") as cpu:
        policy, _ = await cpu.run(_scheduling)
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(0) != os.SCHED_IDLE


async def test_the_thread_kind_stays_in_this_process() -> None:
    async with CpuWork("thread") as cpu:
        assert await cpu.run(_pid) == os.getpid()
        assert cpu.calls == 0


async def test_a_run_with_nothing_to_compute_spawns_nothing() -> None:
    async with CpuWork("process") as cpu:
        pass
    assert cpu.calls == 0


async def test_a_cancelled_run_lets_its_child_go() -> None:
    async def run() -> None:
        async with CpuWork("process") as cpu:
            seen.append(await cpu.run(_pid))
            started.set()
            await cpu.run(_pid_after, 300.0)

    seen: list[int] = []
    started = asyncio.Event()
    task = asyncio.create_task(run())
    await started.wait()
    await asyncio.sleep(0.5)  # the long step is under way in the child
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Ended at once, the step under way (five minutes of it) included.
    assert await _gone(seen[0])


async def test_a_step_s_error_comes_back_and_a_dead_child_fails_the_run() -> None:
    async with CpuWork("process") as cpu:
        with pytest.raises(ValueError, match="no such item"):
            await cpu.run(_fails, "no such item")
        # The child goes on after a step's error.
        assert await cpu.run(_pid) == cpu.pid
        with pytest.raises(JobProcessFailed, match="ended mid-step, exit code 3"):
            await cpu.run(_dies)
        # The next step starts another child.
        assert await cpu.run(_pid) not in (None, os.getpid())


ROOT = Path(__file__).resolve().parent.parent
SERVING = """
import asyncio, os, sys
from memory.jobs.offload import CpuWork
from tests.test_upkeep_offload import _pid, _pid_after

async def main():
    async with CpuWork("process") as cpu:
        print(await cpu.run(_pid), flush=True)
        await cpu.run(_pid_after, 300.0)

asyncio.run(main())
"""


async def test_a_serving_process_killed_with_9_takes_its_child_along() -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SERVING,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        assert parent.stdout is not None
        line = await asyncio.wait_for(parent.stdout.readline(), 120)
        child = int(line)
        assert _alive(child)
        await asyncio.sleep(0.5)  # killed mid-step: the child is not reading its input
        parent.send_signal(signal.SIGKILL)
        # The child holds the pipe too: its end is the parent's wait's end.
        await asyncio.wait_for(parent.wait(), 60)
    finally:
        if parent.returncode is None:
            parent.kill()
            await parent.wait()
    assert parent.returncode == -signal.SIGKILL
    assert await _gone(child)


def test_the_plan_s_groups_and_new_conflicts() -> None:
    """Conflicts are counted new only when one of the pair's items is newer than the
    mark; the same pairs under a mark past both are known, not new."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal(384).astype(np.float32)
    near = base + 0.01 * rng.standard_normal(384).astype(np.float32)
    far = rng.standard_normal(384).astype(np.float32)
    matrix = np.stack([base, near, base.copy(), far])
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)

    def candidate(item_id: int, text: str) -> merge_plan.Candidate:
        return merge_plan.Candidate(item_id, ItemType.FACT, text, 0.8, 0.5, 0, (None, None))

    items = [
        candidate(1, "Miso is 3"),
        candidate(2, "Miso is 4"),
        candidate(3, "Miso is 3"),
        candidate(9, "Sam likes tea"),
    ]
    found = merge_plan.find_groups(items, matrix, 0.85, 3, new_after=0)
    assert [(g.survivor.id, [m.id for m, _ in g.members]) for g in found.groups] == [(3, [1])]
    assert found.conflicts == {"number": 1}
    assert found.new_conflicts == 1
    assert merge_plan.find_groups(items, matrix, 0.85, 3, new_after=3).new_conflicts == 0
    assert merge_plan.find_groups(items, matrix, 0.85, 3, new_after=1).new_conflicts == 1
