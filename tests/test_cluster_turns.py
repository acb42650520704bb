"""Turn order and fan-out across real gateway processes sharing one PostgreSQL (issue 25)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select

from gateway.bench.cluster_pages import Page, cluster_config_text
from gateway.bench.gateway_bench import GatewayProcess, free_port
from gateway.store import Store
from gateway.store.models import Message, MessageRole, Turn, TurnStatus
from gateway.testing.postgres import PG_BINARIES, create_database
from tests.test_memory_postgres import postgres

pytestmark = [
    pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed"),
    pytest.mark.slow,
]
__all__ = ["postgres"]


async def _cluster(
    postgres: str, tmp_path: Path, count: int, *, lease_s: float, delay_s: float
) -> tuple[str, list[GatewayProcess]]:
    url = await create_database(postgres)
    async with Store(url):
        pass  # migrated once before the processes start
    processes = []
    for index in range(count):
        port = free_port()
        config = tmp_path / f"gw{index}.toml"
        config.write_text(
            cluster_config_text(
                tmp_path / f"data{index}", port, url, lease_s=lease_s, delay_s=delay_s
            )
        )
        processes.append(GatewayProcess(config, port, tmp_path / f"gw{index}.log"))
    return url, processes


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _turns(url: str, session: str) -> list[tuple[int, TurnStatus, int | None, str | None]]:
    async with Store(url) as store, store.reader() as reader:
        rows = await reader.execute(
            select(Turn.inbound_message_id, Turn.status, Turn.reply_message_id, Turn.claimed_by)
            .join(Message, Message.id == Turn.inbound_message_id)
            .where(Message.client_id.like(f"{session}-%"))
            .order_by(Turn.id)
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]


async def _assistant_messages(url: str) -> int:
    async with Store(url) as store, store.reader() as reader:
        rows = await reader.execute(select(Message.id).where(Message.role == MessageRole.ASSISTANT))
        return len(rows.all())


async def test_two_pages_on_two_processes_get_one_answer_each_turn_in_order(
    postgres: str, tmp_path: Path, client: aiohttp.ClientSession
) -> None:
    url, (a, b) = await _cluster(postgres, tmp_path, 2, lease_s=15.0, delay_s=0.05)
    async with a, b:
        session = f"two-{uuid.uuid4().hex[:8]}"
        on_a = Page(session, lambda: [a.base_url], client)
        on_b = Page(session, lambda: [b.base_url], client)
        await on_a.open()
        await on_b.open()
        texts = [f"turn {i}" for i in range(6)]
        for index, text in enumerate(texts):
            # The person types on either tab; both tabs see every answer.
            page = on_a if index % 2 == 0 else on_b
            await page.ask(text, f"{session}-{index}", timeout=30)
        await on_a.watch_until(texts, timeout=30)
        await on_b.watch_until(texts, timeout=30)
        await asyncio.sleep(0.5)  # a second answer, if there were one, would come now
        turns = await _turns(url, session)
        assert [status for _m, status, _r, _c in turns] == [TurnStatus.REPLIED] * 6
        expected = [(message_id, reply_id) for message_id, _s, reply_id, _c in turns]
        # Each page: one reply frame per turn, in the turns' order, none twice.
        assert on_a.live_replies() == expected
        assert on_b.live_replies() == expected
        assert await _assistant_messages(url) == 6
        # The streamed deltas reach the tab on the process that did not run the turn.
        for page in (on_a, on_b):
            streamed = {f.body["reply_to"] for f in page.frames if f.body.get("type") == "delta"}
            assert streamed == {message_id for message_id, _r in expected}
        for page in (on_a, on_b):
            await page.close()


async def test_a_turn_whose_process_is_killed_is_answered_by_another(
    postgres: str, tmp_path: Path, client: aiohttp.ClientSession
) -> None:
    # A lease far longer than the test: the survivor must take the turn because the
    # holder's member session ended with it, not because its claim ran out.
    url, (a, b) = await _cluster(postgres, tmp_path, 2, lease_s=60.0, delay_s=2.0)
    async with a, b:
        session = f"kill-{uuid.uuid4().hex[:8]}"
        by_pid = {a.pid: a, b.pid: b}
        on_a = Page(session, lambda: [a.base_url], client)
        on_b = Page(session, lambda: [b.base_url], client)
        await on_a.open()
        await on_b.open()
        await on_a.send("hello there", f"{session}-0")
        holder = None
        for _ in range(100):
            turns = await _turns(url, session)
            if turns and turns[0][3]:
                holder = by_pid[int(turns[0][3].split(":")[1])]
                break
            await asyncio.sleep(0.05)
        assert holder is not None, "no process claimed the turn"
        survivor = b if holder is a else a
        watcher = on_b if holder is a else on_a
        dead_claim_until = await _first_turn(url, session, Turn.claim_until)
        await holder.kill()
        # The survivor runs the turn: the page on it is answered.
        await watcher.watch_until(["hello there"], timeout=60)
        turns = await _turns(url, session)
        assert len(turns) == 1
        message_id, status, reply_id, claimed_by = turns[0]
        assert status is TurnStatus.REPLIED
        assert claimed_by is not None
        assert int(claimed_by.split(":")[1]) == survivor.pid
        assert watcher.live_replies() == [(message_id, reply_id)]
        assert await _assistant_messages(url) == 1
        # Answered while the dead process's claim still had most of its 60 s to go.
        assert await _first_turn(url, session, Turn.finished_at) < dead_claim_until
        await watcher.close()


async def _first_turn(url: str, session: str, column: Any) -> datetime:
    """``column`` (a time of the turn) of the session's first message's turn."""
    async with Store(url) as store, store.reader() as reader:
        found = await reader.scalar(
            select(column)
            .join(Message, Message.id == Turn.inbound_message_id)
            .where(Message.client_id == f"{session}-0")
        )
    assert isinstance(found, datetime)
    return found
