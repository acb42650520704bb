"""The session flush (issue 21): when a session ends — its page closed, idle, or the
gateway stopped by SIGTERM — the observer reads the person's backlog; before the first
pack of a session it reads it too, bounded by a timeout."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import create_engine, text

from gateway.bench.gateway_bench import child_environment, free_port
from gateway.config import Config
from gateway.sessions import Sessions
from gateway.store import Store
from gateway.store.repo import resolve_address, store_inbound
from persona.observation.backlog import conversations_behind
from persona.observation.log import ObservationLog
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.panel_support import receive_until
from tests.test_startup import read_until

# The observer's own threshold is never reached: only a flush reads the messages.
SECTIONS: dict[str, dict[str, Any]] = {
    "observe": {"observer": "rules", "observer_tokens": 1_000_000},
    "upkeep_jobs": {"session_idle_s": 0.0, "session_catch_up_s": 30.0, "session_close_s": 0.0},
}


async def backlog(running: RunningGateway) -> list[tuple[int, int]]:
    return await conversations_behind(running.gateway.store, None)


async def say(ws: aiohttp.ClientWebSocketResponse, words: str) -> None:
    await ws.send_json({"type": "message", "text": words, "client_id": str(uuid.uuid4())})
    await receive_until(ws, "reply")


async def wait_until_read(running: RunningGateway) -> None:
    # Polled for up to 60 s: a loaded CI machine is slow, a missing flush never reads it.
    for _ in range(1200):
        if not await backlog(running):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the observer never read the backlog: {await backlog(running)}")


@pytest.fixture
async def gateway_with(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    started: list[tuple[Any, aiohttp.ClientSession]] = []

    async def start(**changes: dict[str, Any]) -> RunningGateway:
        sections = {k: dict(v) for k, v in SECTIONS.items()}
        for name, values in changes.items():
            sections.setdefault(name, {}).update(values)
        config: Config = make_config(tmp_path, **sections)
        server, session = await start_gateway(config, None)
        started.append((server, session))
        return RunningGateway(server, session)

    yield start
    for server, session in started:
        await session.close()
        await server.close()


async def test_a_closed_page_has_the_observer_read_what_it_left(gateway_with: Any) -> None:
    running: RunningGateway = await gateway_with()
    ws = await running.ws("flush-page-1")
    await say(ws, "I adopted a grey cat called Miso last spring.")
    assert await running.gateway.router.drain(30)
    # The reply (at least) waits for the observer: its threshold is far away.
    assert await backlog(running)
    await ws.close()
    await wait_until_read(running)
    sessions = running.gateway.sessions
    assert sessions is not None
    # Counted when the flush ends (after the index save), a moment after the pass.
    for _ in range(200):
        if sessions.flushed:
            break
        await asyncio.sleep(0.05)
    assert sessions.flushed >= 1


async def test_an_idle_session_is_flushed_with_its_page_still_open(gateway_with: Any) -> None:
    running: RunningGateway = await gateway_with(upkeep_jobs={"session_idle_s": 0.3})
    ws = await running.ws("flush-idle-1")
    try:
        await say(ws, "My sister Ana lives in Lisbon and works as a nurse.")
        await wait_until_read(running)
    finally:
        await ws.close()


async def test_the_first_pack_of_a_session_waits_for_the_backlog_bounded() -> None:
    calls: list[int | None] = []
    release = asyncio.Event()

    async def slow(person_id: int | None) -> int:
        calls.append(person_id)
        await release.wait()
        return 3

    sessions = Sessions([slow], None, idle_s=0, catch_up_s=0.05)
    await sessions.before_pack(7, 70, 700)
    # Bounded: the pack went ahead while the extraction still runs.
    assert calls == [7]
    assert sessions.flushed == 0
    await sessions.before_pack(7, 70, 701)  # the same session: no second catch-up
    assert calls == [7]
    release.set()
    assert await sessions.aclose(5)
    # The stop flushed the open session once more; the first catch-up finished too.
    assert calls == [7, 7]
    assert sessions.flushed == 6


async def test_a_stop_gives_up_on_a_flush_after_the_grace() -> None:
    async def stuck(person_id: int | None) -> int:
        await asyncio.sleep(60)
        return 0

    sessions = Sessions([stuck], None, idle_s=0, catch_up_s=0)
    await sessions.before_pack(1, 10, 100)
    assert not await sessions.aclose(0.1)


async def test_only_an_older_backlog_holds_a_first_pack_and_a_reload_keeps_the_session() -> None:
    calls: list[int | None] = []
    older: dict[int, bool] = {1: False, 2: True}

    async def extract(person_id: int | None) -> int:
        calls.append(person_id)
        return 1

    async def behind(person_id: int, before_message_id: int) -> bool:
        return older[person_id]

    sessions = Sessions([extract], None, idle_s=0, catch_up_s=5, close_s=30, behind=behind)
    await sessions.before_pack(1, 10, 100)  # nothing older than this message: no pass
    await sessions.before_pack(2, 20, 200)
    assert calls == [2]
    # A page closed and came back (a reload) within close_s: the same session.
    sessions.page_closed(10)
    await sessions.before_pack(1, 10, 101)
    await asyncio.sleep(0.05)
    assert calls == [2]
    assert sessions.open_sessions == 2
    assert await sessions.aclose(5)
    assert sorted(c for c in calls if c is not None) == [1, 2, 2]


async def test_a_new_session_first_reads_what_an_earlier_one_left_unread(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, **SECTIONS)
    # A session that ended in a crash: its messages are stored, never observed.
    async with Store(config.database_url) as store:
        address = await resolve_address(store, "webchat", "flush-crash-1")
        left = await store_inbound(
            store, address, "I am allergic to peanuts.", datetime.now(UTC), "old-1"
        )
    server, session = await start_gateway(config, None)
    running = RunningGateway(server, session)
    try:
        ws = await running.ws("flush-crash-1")
        await say(ws, "What should I cook tonight?")
        log = ObservationLog(running.gateway.store)
        # Read before the pack; the new message is the observer's in its own time.
        assert await log.cursor(address.conversation_id) >= left.message_id
        await ws.close()
    finally:
        await session.close()
        await server.close()


def test_sigterm_flushes_the_backlog_before_the_process_ends(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "agentgw.toml"
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[store]\ndata_dir = {json.dumps(str(tmp_path / 'data'))}\n"
        '[brain]\nkind = "scripted"\n'
        '[memory]\nembedder = "none"\n'
        "[voice]\nenabled = false\n"
        '[observe]\nobserver = "rules"\nobserver_tokens = 1000000\n'
        "[upkeep_jobs]\nsession_idle_s = 0.0\n",
        encoding="utf-8",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "run", "--config", str(config)],
        cwd=tmp_path,
        env=child_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        read_until(process, "agentgw: ready")

        async def talk() -> None:
            async with (
                aiohttp.ClientSession() as client,
                client.ws_connect(f"http://127.0.0.1:{port}/ws?session=flush-sigterm-1") as ws,
            ):
                await say(ws, "I am training for the Berlin marathon in September.")
                await say(ws, "My favourite food is ramen.")
                # The page stays open: the stop, not a closed page, must flush it.
                process.send_signal(signal.SIGTERM)
                await ws.receive(timeout=60)

        asyncio.run(talk())
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out
    engine = create_engine(f"sqlite:///{tmp_path / 'data' / 'agentgw.db'}")
    try:
        with engine.connect() as connection:
            newest = connection.execute(text("SELECT max(id) FROM messages")).scalar()
            read = connection.execute(
                text("SELECT max(observed_through_message_id) FROM observe_cursors")
            ).scalar()
    finally:
        engine.dispose()
    assert newest is not None
    assert read == newest, out


async def test_the_backlog_query_sees_only_unread_conversations(store: Store) -> None:
    address = await resolve_address(store, "webchat", "backlog-1", display_name="Sam")
    assert await conversations_behind(store, None) == []
    inbound = await store_inbound(store, address, "hello there", datetime.now(UTC), "c1")
    assert await conversations_behind(store, address.person_id) == [
        (address.conversation_id, address.person_id)
    ]
    assert await conversations_behind(store, address.person_id + 1) == []
    assert await conversations_behind(store, None, inbound.message_id) == []
    await ObservationLog(store).advance(address.conversation_id, inbound.message_id)
    assert await conversations_behind(store, None) == []


async def test_the_quiet_spell_counts_from_the_end_of_a_turn_not_its_start() -> None:
    sessions = Sessions([], None, idle_s=0.4, catch_up_s=0.05)
    await sessions.before_pack(7, 70, 700)
    await asyncio.sleep(0.3)  # a slow turn, most of the idle time long
    sessions.turn_ended(7, 70)
    await asyncio.sleep(0.2)  # 0.5 s after the turn began, 0.2 s after it ended
    assert sessions.open_sessions == 1
    for _ in range(200):
        if sessions.open_sessions == 0:
            break
        await asyncio.sleep(0.02)
    assert sessions.open_sessions == 0


async def test_a_turn_that_outlasts_its_session_opens_one_again_for_its_reply() -> None:
    sessions = Sessions([], None, idle_s=0.1, catch_up_s=0.05)
    await sessions.before_pack(7, 70, 700)
    await asyncio.sleep(0.3)  # the session ended (idle) while the turn still ran
    assert sessions.open_sessions == 0
    sessions.turn_ended(7, 70)
    assert sessions.open_sessions == 1  # its reply is flushed when this one ends
