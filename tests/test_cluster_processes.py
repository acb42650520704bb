"""Several real gateway processes on one throwaway PostgreSQL (issue 25): the
migrations run once when three start together, the Telegram poller fails over
within the lease when its holder is killed (fake Bot API), and a SQLite store
still refuses a second gateway."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.bench.gateway_bench import GatewayProcess, child_environment
from gateway.store import Store
from gateway.store.leases import leases
from gateway.store.members import live_members, members
from gateway.testing.fake_telegram import FakeTelegram
from gateway.testing.postgres import PG_BINARIES, create_database, free_port
from tests.test_memory_postgres import postgres

pytestmark = pytest.mark.skipif(not PG_BINARIES, reason="Debian postgresql is not installed")
__all__ = ["postgres"]

LEASE_S = 3.0
TOKEN_ENV = "CLUSTER_TEST_BOT_TOKEN"  # child_environment drops AGENTGW_ and TELEGRAM_ names
FAKE_TOKEN = "123456:TEST-fake-token"


def cluster_config(
    folder: Path, url: str, port: int, *, telegram: FakeTelegram | None, lease_s: float = LEASE_S
) -> Path:
    text = (
        f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[store]\ndata_dir = {json.dumps(str(folder / 'data'))}\n"
        f"url = {json.dumps(url)}\ncluster = true\nlease_s = {lease_s}\n"
        '[brain]\nkind = "scripted"\n[scripted]\ndelay_s = 0.0\n[voice]\nenabled = false\n'
        "[memory]\nenabled = false\n[persona]\nenabled = false\n[observe]\nenabled = false\n"
        "[lessons]\nenabled = false\n[triggers]\nenabled = false\n"
        "[continuity]\nenabled = false\n"
    )
    if telegram is not None:
        text += (
            '[telegram]\nenabled = true\nmode = "polling"\n'
            f"token_env = {json.dumps(TOKEN_ENV)}\npoll_timeout_s = 0.5\n"
            "allowed_user_ids = [501]\n"
            f"base_url = {json.dumps(telegram.base_url)}\n"
            f"base_file_url = {json.dumps(telegram.base_file_url)}\n"
        )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agentgw.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    server = FakeTelegram(FAKE_TOKEN, max_poll_s=0.5)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def poller_holder(store: Store) -> str | None:
    for state in await leases(store):
        if state.name == "telegram-poller" and state.held:
            return state.holder
    return None


async def test_three_gateways_started_together_migrate_once(postgres: str, tmp_path: Path) -> None:
    url = await create_database(postgres)
    gateways = [
        GatewayProcess(
            cluster_config(tmp_path / f"g{n}", url, port, telegram=None),
            port,
            tmp_path / f"g{n}.log",
        )
        for n, port in enumerate(free_port() for _ in range(3))
    ]
    try:
        await asyncio.gather(*(g.start() for g in gateways))
        logs = [g.log_text() for g in gateways]
        migrated = [log for log in logs if "migrated the database from empty to" in log]
        assert len(migrated) == 1, "\n---\n".join(log[-2000:] for log in logs)
        async with Store(url) as store:
            live = await live_members(store, LEASE_S)
        assert sorted(m.pid for m in live) == sorted(g.pid for g in gateways)
        async with aiohttp.ClientSession() as session:
            for gateway in gateways:
                async with session.get(f"{gateway.base_url}/readyz") as response:
                    body = await response.json()
                assert body["checks"]["cluster"]["ok"], body
                assert body["checks"]["cluster"]["live_members"] == 3
                assert body["checks"]["migrations"]["ok"]
        # `agentgw cluster status` from the shell: the same three, and their lag.
        status = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway",
            "cluster",
            "status",
            "--json",
            "--config",
            str(gateways[1].config_path),
            stdout=asyncio.subprocess.PIPE,
            env=child_environment(),
        )
        out, _ = await status.communicate()
        assert status.returncode == 0
        shown = json.loads(out)
        assert shown["live"] == 3
        assert sorted(m["pid"] for m in shown["members"]) == sorted(g.pid for g in gateways)
        assert all(m["heartbeat_lag_s"] < LEASE_S for m in shown["members"])
        # A clean stop leaves: the others see two.
        assert await gateways[0].stop() == 0
        async with Store(url) as store:
            assert len(await members(store, LEASE_S)) == 2
    finally:
        await asyncio.gather(*(g.kill() for g in gateways), return_exceptions=True)


async def test_killing_the_telegram_poller_hands_polling_to_another_at_once(
    postgres: str,
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, FAKE_TOKEN)
    url = await create_database(postgres)
    ports = [free_port(), free_port()]
    # A lease far longer than the test: the poller must move because its holder's
    # member session ended with it, not because its lease ran out.
    lease_s = 60.0
    gateways = [
        GatewayProcess(
            cluster_config(tmp_path / f"g{n}", url, port, telegram=fake_telegram, lease_s=lease_s),
            port,
            tmp_path / f"g{n}.log",
        )
        for n, port in enumerate(ports)
    ]
    store = Store(url)
    try:
        # One after the other: the first creates the schema, the second finds it.
        for gateway in gateways:
            await gateway.start()
        await store.open()
        deadline = time.monotonic() + 30
        while (holder := await poller_holder(store)) is None:
            assert time.monotonic() < deadline, "nobody took the poller's lease"
            await asyncio.sleep(0.1)
        by_pid = {g.pid: g for g in gateways}
        pid_of = {m.id: m.pid for m in await members(store, lease_s)}
        polling, other = (
            by_pid[pid_of[holder]],
            next(g for g in gateways if g.pid != pid_of[holder]),
        )
        # Exactly one process polls: every getUpdates comes from the holder.
        fake_telegram.push(fake_telegram.text_update(501, "hello before"))
        await fake_telegram.wait_for(
            lambda: any(c.method == "sendMessage" for c in fake_telegram.calls), 30, "a reply"
        )
        assert "telegram: polling" in polling.log_text()
        assert "telegram: polling" not in other.log_text()

        [dying] = [state for state in await leases(store) if state.name == "telegram-poller"]
        await polling.kill()
        killed_at = time.monotonic()
        while (new_holder := await poller_holder(store)) in (None, holder):
            assert time.monotonic() - killed_at < 2 * lease_s, "the lease was not taken over"
            await asyncio.sleep(0.05)
        took_over_s = time.monotonic() - killed_at
        assert pid_of[new_holder] == other.pid
        assert new_holder in {m.id for m in await live_members(store, lease_s)}
        [taken] = [state for state in await leases(store) if state.name == "telegram-poller"]
        # Taken while the dead holder's lease still had most of its 60 s to go.
        assert taken.taken_at < dying.until
        replies_before = len(fake_telegram.sent_texts(501))
        fake_telegram.push(fake_telegram.text_update(501, "hello after"))
        await fake_telegram.wait_for(
            lambda: len(fake_telegram.sent_texts(501)) > replies_before, 30, "a reply after"
        )
        answered_s = time.monotonic() - killed_at
        assert "telegram: polling" in other.log_text()
        logging.getLogger(__name__).warning(
            "poller failover: lease taken %.2f s, answered %.2f s", took_over_s, answered_s
        )
    finally:
        await store.close()
        await asyncio.gather(*(g.kill() for g in gateways), return_exceptions=True)


async def test_sqlite_still_refuses_a_second_gateway(tmp_path: Path) -> None:
    database = tmp_path / "shared.db"
    configs = []
    for n in range(2):
        port = free_port()
        folder = tmp_path / f"g{n}"
        folder.mkdir()
        path = folder / "agentgw.toml"
        path.write_text(
            f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
            f"[store]\ndata_dir = {json.dumps(str(folder / 'data'))}\n"
            f"url = {json.dumps(f'sqlite+aiosqlite:///{database}')}\n"
            '[brain]\nkind = "scripted"\n[voice]\nenabled = false\n[memory]\nenabled = false\n',
            encoding="utf-8",
        )
        configs.append(GatewayProcess(path, port, folder / "gateway.log"))
    first, second = configs
    await first.start()
    try:
        with pytest.raises(RuntimeError, match="exited at start") as refused:
            await second.start()
        assert (
            "another agentgw" in str(refused.value).lower()
            or "in use" in str(refused.value).lower()
        ), str(refused.value)[-2000:]
    finally:
        await first.kill()
        await second.kill()
