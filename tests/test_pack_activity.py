"""Packs under way, and the wait of background batches for none (memory/pack_activity.py)."""

from __future__ import annotations

import asyncio

from memory.pack_activity import PackActivity


async def test_quiet_waits_for_the_packs_under_way_to_end() -> None:
    packs = PackActivity()
    assert await packs.quiet()
    assert packs.waits == 0
    release = asyncio.Event()

    async def pack() -> None:
        with packs.pack():
            await release.wait()

    first = asyncio.create_task(pack(), name="pack-1")
    second = asyncio.create_task(pack(), name="pack-2")
    await asyncio.sleep(0)
    assert packs.under_way == 2
    waiting = asyncio.create_task(packs.quiet(), name="quiet")
    await asyncio.sleep(0.05)
    assert not waiting.done()
    release.set()
    await asyncio.gather(first, second)
    assert await waiting
    assert packs.under_way == 0
    assert packs.waits == 1


async def test_the_wait_is_bounded_so_packs_back_to_back_do_not_stall_a_job() -> None:
    packs = PackActivity()
    with packs.pack():
        assert not await packs.quiet(most_s=0.01)
    assert packs.under_way == 0
    assert await packs.quiet()


async def test_a_write_s_thread_pauses_while_a_pack_is_under_way() -> None:
    packs = PackActivity()
    packs.pause()
    assert packs.pauses == 0
    with packs.pack():
        paused = asyncio.create_task(asyncio.to_thread(packs.pause, 60.0), name="pause")
        await asyncio.sleep(0.05)
        assert not paused.done()
    # It goes on when the pack ends, not at its bound.
    await asyncio.wait_for(paused, 30.0)
    assert packs.pauses == 1
