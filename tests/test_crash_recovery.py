"""Killing the real gateway process mid-turn loses no stored message.

``agentgw run`` runs as a subprocess on a free loopback port; the scripted
brain is told to take a minute, so the turn is still generating when the
process gets SIGKILL. On restart the message is in the history, its turn is
failed with ``interrupted``, and the gateway answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.bench.gateway_bench import GatewayProcess, free_port

SESSION = "crash-test-session"


def write_config(
    folder: Path, data_dir: Path, port: int, delay_s: float, *, database: Path | None = None
) -> Path:
    """A config on ``port``; its database is ``database`` when given, else the data dir's."""
    path = folder / f"agentgw-{port}.toml"
    url = f"url = {json.dumps(f'sqlite+aiosqlite:///{database}')}\n" if database else ""
    path.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[store]\ndata_dir = {json.dumps(str(data_dir))}\n{url}"
        '[brain]\nkind = "scripted"\n'
        f"[scripted]\ndelay_s = {delay_s}\n"
        "[voice]\nenabled = false\n",
        encoding="utf-8",
    )
    return path


def turn_rows(database: Path) -> list[tuple[int, str, str | None]]:
    """(inbound message id, status, error code) of every turn, read beside the running gateway."""
    with contextlib.closing(sqlite3.connect(database)) as connection:
        return connection.execute(
            "SELECT inbound_message_id, status, error_code FROM turns ORDER BY id"
        ).fetchall()


async def wait_for_status(database: Path, message_id: int, status: str) -> None:
    async with asyncio.timeout(20):
        while True:
            rows = await asyncio.to_thread(turn_rows, database)
            if any(row[0] == message_id and row[1] == status for row in rows):
                return
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def page(
    gateway: GatewayProcess,
) -> AsyncIterator[tuple[aiohttp.ClientWebSocketResponse, Any]]:
    """A webchat page: the socket and the history frame it got on connect."""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{gateway.base_url}/ws?session={SESSION}") as ws,
    ):
        assert (await ws.receive_json(timeout=10))["type"] == "hello"
        history = await ws.receive_json(timeout=10)
        assert history["type"] == "history"
        yield ws, history


async def receive_until(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    while True:
        frame: dict[str, Any] = await ws.receive_json(timeout=20)
        assert frame["type"] != "error", frame
        if frame["type"] == kind:
            return frame


@pytest.fixture
async def first_gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    port = free_port()
    config = write_config(tmp_path, tmp_path / "data", port, delay_s=60.0)
    gateway = GatewayProcess(config, port, tmp_path / "first.log")
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.kill()


async def test_kill_mid_turn_keeps_the_message_and_marks_the_turn_interrupted(
    tmp_path: Path, first_gateway: GatewayProcess
) -> None:
    database = tmp_path / "data" / "agentgw.db"
    async with page(first_gateway) as (ws, history):
        assert history["messages"] == []
        await ws.send_json({"type": "message", "text": "remember me", "client_id": "crash-1"})
        ack = await receive_until(ws, "ack")
        message_id = ack["message_id"]
        # The brain has been called and is thinking: the process dies mid-turn.
        await wait_for_status(database, message_id, "generating")
        await first_gateway.kill()
        with pytest.raises((aiohttp.ClientError, ConnectionError, TypeError, TimeoutError)):
            # The socket breaks: a close frame is not JSON, or the read fails.
            await ws.receive_json(timeout=10)

    port = free_port()
    config = write_config(tmp_path, tmp_path / "data", port, delay_s=0.0)
    second = GatewayProcess(config, port, tmp_path / "second.log")
    await second.start()
    try:
        async with page(second) as (ws, history):
            messages = history["messages"]
            assert [(m["message_id"], m["role"], m["text"]) for m in messages] == [
                (message_id, "user", "remember me")
            ]
            assert messages[0]["client_id"] == "crash-1"
            assert messages[0]["status"] == "failed"
            assert messages[0]["error_code"] == "interrupted"

            # The gateway answers again.
            await ws.send_json({"type": "message", "text": "are you back?", "client_id": "c-2"})
            reply = await receive_until(ws, "reply")
            assert reply["text"] == "You said: are you back?"

            # And the interrupted turn can be run again from the page.
            await ws.send_json({"type": "retry", "message_id": message_id})
            assert (await receive_until(ws, "retrying"))["message_id"] == message_id
            retried = await receive_until(ws, "reply")
            assert retried["reply_to"] == message_id
            assert retried["text"] == "You said: remember me"
    finally:
        assert await second.stop() == 0
    rows = await asyncio.to_thread(turn_rows, database)
    assert [row[1] for row in rows] == ["replied", "replied"]


async def test_a_second_gateway_on_the_same_data_dir_or_database_is_refused(
    tmp_path: Path, first_gateway: GatewayProcess
) -> None:
    # It would keep memory indexes of its own (and overwrite the first one's files).
    database = tmp_path / "data" / "agentgw.db"
    same_dir = write_config(tmp_path, tmp_path / "data", free_port(), delay_s=0.0)
    # Another data directory, configured with the first gateway's database file.
    same_database = write_config(
        tmp_path, tmp_path / "other", free_port(), delay_s=0.0, database=database
    )
    refusals = {
        same_dir: f"{tmp_path / 'data'} is in use by another agentgw (pid {first_gateway.pid})",
        same_database: (
            f"the database {database.resolve()} is in use by another agentgw "
            f"(pid {first_gateway.pid})"
        ),
    }
    for config, in_use in refusals.items():
        for command in ("run", "vacuum"):
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway",
                command,
                "--config",
                str(config),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
            )
            try:
                _, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
            finally:
                if process.returncode is None:  # it started after all: leave no process behind
                    process.kill()
                    await process.wait()
            assert process.returncode == 2, (command, stderr)
            assert in_use in stderr.decode(), (command, stderr)
    # The first one was not disturbed.
    async with page(first_gateway) as (_, history):
        assert history["messages"] == []
