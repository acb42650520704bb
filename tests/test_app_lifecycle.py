"""The app (gateway/app.py): the persona file is read once, the parts close in the
reverse of the order they opened (also when the start fails), the chat page is
rendered by jinja2 with the agent's name as text."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

import gateway.app
from gateway.app import create_app
from gateway.brains.scripted import ScriptedBrain
from gateway.runtime import GATEWAY
from gateway.store import Store
from memory.service import MemoryService
from tests.conftest import make_config, start_gateway


async def test_the_persona_file_is_read_once_and_shown_as_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    persona = tmp_path / "persona.md"
    persona.write_text("You are {name}, a careful gardener.\n", encoding="utf-8")
    reads: list[Path] = []
    read_text = Path.read_text

    def counting(self: Path, *args: object, **kwargs: object) -> str:
        if self == persona:
            reads.append(self)
        return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counting)
    config = make_config(tmp_path, agent={"name": "Ada", "persona_file": str(persona)})
    server, session = await start_gateway(config, ScriptedBrain())
    try:
        assert len(reads) == 1
        # The prompt's first block and the panel both show the text read at start,
        # even after the file changed (it is read again only by a restart).
        persona.write_text("You are {name}, a sailor.\n", encoding="utf-8")
        async with session.get(server.make_url("/api/persona")) as response:
            assert response.status == 200
            body = await response.json()
        assert body["identity"] == "You are Ada, a careful gardener.\n"
        pipeline = server.app[GATEWAY].pipeline
        assert pipeline is not None
        assert pipeline.stages[0].name == "persona"
        assert pipeline.stages[0].persona == "You are Ada, a careful gardener.\n"  # type: ignore[attr-defined]
        assert len(reads) == 1
    finally:
        await session.close()
        await server.close()


def upkeep_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "upkeep-calendar" and not t.done()]


async def test_parts_close_in_reverse_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []

    class Brain(ScriptedBrain):
        async def aclose(self) -> None:
            closed.append("brain")
            await super().aclose()

    memory_aclose = MemoryService.aclose

    async def memory_closes(self: MemoryService) -> None:
        # The upkeep task must have stopped: the index files are written last.
        closed.append(f"memory (upkeep running: {len(upkeep_tasks())})")
        await memory_aclose(self)

    store_close = Store.close

    async def store_closes(self: Store) -> None:
        closed.append("store")
        await store_close(self)

    monkeypatch.setattr(MemoryService, "aclose", memory_closes)
    monkeypatch.setattr(Store, "close", store_closes)
    config = make_config(tmp_path)
    server = TestServer(create_app(config, brain=Brain()), host="127.0.0.1")
    await server.start_server()
    await server.app[GATEWAY].ready.wait()
    assert len(upkeep_tasks()) == 1
    await server.close()
    assert closed == ["memory (upkeep running: 0)", "brain", "store"]


async def test_a_failed_start_closes_what_had_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[str] = []

    class Brain(ScriptedBrain):
        async def aclose(self) -> None:
            closed.append("brain")
            await super().aclose()

    async def broken(*args: object) -> None:
        raise RuntimeError("links table is broken")

    monkeypatch.setattr(gateway.app, "apply_config_links", broken)
    config = make_config(tmp_path)
    server = TestServer(create_app(config, brain=Brain()), host="127.0.0.1")
    with pytest.raises(RuntimeError, match="links table is broken"):
        await server.start_server()
    await server.close()
    assert closed == ["brain"]
    # The data directory and the database were let go: a second gateway starts.
    second = TestServer(create_app(config, brain=ScriptedBrain()), host="127.0.0.1")
    monkeypatch.undo()
    await second.start_server()
    try:
        await second.app[GATEWAY].ready.wait()
    finally:
        await second.close()


async def test_the_chat_page_is_rendered_with_the_name_as_text(tmp_path: Path) -> None:
    name = 'Ada <img src=x onerror="alert(1)"> & {{co}}'
    config = make_config(tmp_path, agent={"name": name}, voice={"enabled": False})
    server, session = await start_gateway(config, ScriptedBrain())
    try:
        async with session.get(server.make_url("/")) as response:
            assert response.status == 200
            page = await response.text()
    finally:
        await session.close()
        await server.close()
    escaped = "Ada &lt;img src=x onerror=&#34;alert(1)&#34;&gt; &amp; {{co}}"
    assert f"<title>{escaped} · chat</title>" in page
    assert f'<h1 id="agent-name">{escaped}</h1>' in page
    assert "<img" not in page
    assert 'data-voice="off"' in page
    assert f'data-voice-max-seconds="{config.voice.max_seconds:g}"' in page
    # Every placeholder was filled: none is left for the browser to show.
    assert "{{agent_name" not in page
    assert "voice_enabled" not in page
