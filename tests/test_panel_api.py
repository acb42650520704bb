"""The panel's pages and JSON API over real HTTP, on a store seeded through real
turns: what each serves, how bad input and unknown ids are answered, that
changes take effect on the next turn, and the same-origin and access rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from gateway.brains.base import BlockKind
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.panel_support import PANEL_SECTIONS, SEED_MESSAGES, chat, seed


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, **PANEL_SECTIONS)


@pytest.fixture
async def seeded(running: RunningGateway, brain: ScriptedBrain) -> RunningGateway:
    await seed(running, brain)
    return running


async def get_json(running: RunningGateway, path: str, status: int = 200) -> Any:
    async with running.session.get(running.url(path)) as response:
        assert response.status == status, await response.text()
        return await response.json() if status == 200 else await response.text()


async def send(
    running: RunningGateway, method: str, path: str, body: Any = None, **headers: str
) -> tuple[int, Any]:
    async with running.session.request(
        method, running.url(path), json=body, headers=headers
    ) as response:
        if response.content_type == "application/json":
            return response.status, await response.json()
        return response.status, await response.text()


def memory_block(brain: ScriptedBrain) -> str:
    return "\n".join(b.text for b in brain.requests[-1].system if b.kind is BlockKind.MEMORY)


def persona_block(brain: ScriptedBrain) -> str:
    return "\n".join(b.text for b in brain.requests[-1].system if b.kind is BlockKind.PERSONA)


async def test_every_page_renders_the_seeded_data(seeded: RunningGateway) -> None:
    pages = {
        "/panel": ["Recent conversations", "webchat"],
        "/panel/memory": ["Anastasia"],
        "/panel/conversations": ["webchat", "replied"],
        "/panel/observations": ["Anastasia"],
        "/panel/drift": ["drift-data", "Anchors and rebases"],
        "/panel/persona": ["Never use emojis", "Always answer in English", "Roll back"],
    }
    for path, expected in pages.items():
        async with seeded.session.get(seeded.url(path)) as response:
            assert response.status == 200, path
            assert response.content_type == "text/html"
            html = await response.text()
        for wanted in expected:
            assert wanted in html, f"{path} lacks {wanted!r}"


async def test_overview_and_turns_api(seeded: RunningGateway) -> None:
    overview = await get_json(seeded, "/api/overview")
    assert overview["counts"]["turns"] == len(SEED_MESSAGES)
    assert overview["counts"]["pending_rules"] == 1
    assert overview["memory_by_type"]["episode"] >= 8
    turns = (await get_json(seeded, "/api/turns"))["turns"]
    assert [t["status"] for t in turns] == ["replied"] * len(SEED_MESSAGES)
    newest = turns[0]
    assert newest["pack"] is not None
    assert newest["pack"]["items"] > 0
    assert newest["syncscore"]["judge"]
    assert any(t["actions"] for t in turns), "the drifting replies fired no anchor"
    pack = await get_json(seeded, f"/api/turns/{newest['id']}/pack")
    assert pack["candidates"]
    assert all("reason" in c for c in pack["candidates"])
    assert set(pack["kept_ids"]) <= {c["id"] for c in pack["candidates"]}
    conversation = await get_json(seeded, f"/api/conversations/{newest['conversation_id']}")
    assert [m["role"] for m in conversation["messages"]][:2] == ["user", "assistant"]


async def test_the_pack_page_shows_what_was_searched(seeded: RunningGateway) -> None:
    # The agent's name says who the message is for, not what it is about.
    await chat(seeded, ["Ada, which museums in Lisbon would Anastasia like?"])
    newest = (await get_json(seeded, "/api/turns"))["turns"][0]
    pack = await get_json(seeded, f"/api/turns/{newest['id']}/pack")
    assert pack["notes"]["searched"] == "which museums in Lisbon would Anastasia like?"
    async with seeded.session.get(seeded.url(f"/panel/memory/turns/{newest['id']}")) as response:
        assert response.status == 200
        html = await response.text()
    assert "Searched for" in html
    assert "which museums in Lisbon would Anastasia like?" in html


async def test_memory_edit_pin_archive_restore_delete_take_effect(
    seeded: RunningGateway, brain: ScriptedBrain
) -> None:
    found = await get_json(seeded, "/api/memory/items?q=Anastasia&status=active")
    remembered = [i for i in found["items"] if i["type"] != "episode"]
    assert remembered, found
    item = remembered[0]

    status, edited = await send(
        seeded, "PATCH", f"/api/memory/items/{item['id']}", {"content": "My sister is Natasha."}
    )
    assert status == 200, edited
    assert edited["id"] != item["id"]
    assert edited["content"] == "My sister is Natasha."
    detail = await get_json(seeded, f"/api/memory/items/{edited['id']}")
    assert [v["id"] for v in detail["chain"]][-2:] == [item["id"], edited["id"]]
    assert detail["chain"][-2]["status"] == "superseded"

    await chat(seeded, ["Who is my sister?"])
    assert "Natasha" in memory_block(brain)

    status, pinned = await send(seeded, "POST", f"/api/memory/items/{edited['id']}/pin")
    assert status == 200
    assert pinned["pinned"] is True
    await chat(seeded, ["Tell me something about trains."])
    assert "Natasha" in memory_block(brain), "a pinned item is offered to every pack"

    status, archived = await send(seeded, "POST", f"/api/memory/items/{edited['id']}/archive")
    assert status == 200
    assert archived["tier"] == "archived"
    assert archived["pinned"] is False
    status, restored = await send(seeded, "POST", f"/api/memory/items/{edited['id']}/restore")
    assert status == 200
    assert restored["tier"] == "active"

    status, body = await send(seeded, "DELETE", f"/api/memory/items/{edited['id']}")
    assert status == 200
    assert body["deleted"] == edited["id"]
    await get_json(seeded, f"/api/memory/items/{edited['id']}", status=404)


async def test_memory_api_refuses_bad_input(seeded: RunningGateway) -> None:
    await get_json(seeded, "/api/memory/items?type=gossip", status=400)
    await get_json(seeded, "/api/memory/items?limit=many", status=400)
    await get_json(seeded, "/api/memory/items/999999", status=404)
    missing = await get_json(seeded, "/api/turns/999999/pack", status=404)
    # Says why a trace may be gone: upkeep deletes those past their keep.
    assert "kept 90 days: memory.trace_keep_days" in missing
    item = (await get_json(seeded, "/api/memory/items?limit=1"))["items"][0]
    for body in ({"priority": 2}, {"priority": "high"}, {"content": ""}, {"colour": "red"}):
        status, answer = await send(seeded, "PATCH", f"/api/memory/items/{item['id']}", body)
        assert status == 400, body
        assert answer["error"]["message"]
    status, _ = await send(seeded, "POST", f"/api/memory/items/{item['id']}/explode")
    assert status == 404
    async with seeded.session.patch(
        seeded.url(f"/api/memory/items/{item['id']}"), data=b"not json"
    ) as response:
        assert response.status == 400


async def test_persona_rollback_and_rules_change_the_next_prompt(
    seeded: RunningGateway, brain: ScriptedBrain
) -> None:
    persona = await get_json(seeded, "/api/persona")
    assert [r["text"] for r in persona["pending_rules"]] == ["Always answer in English"]
    rule_id = persona["pending_rules"][0]["id"]
    status, version = await send(seeded, "POST", f"/api/persona/rules/{rule_id}/confirm")
    assert status == 200
    assert [text for _, text in version["state"]["hard_rules"]][-1] == "Always answer in English"
    await chat(seeded, ["Hello again."])
    assert "Always answer in English" in persona_block(brain)

    # Version 1 is the seed, before any rule was confirmed.
    diff = await get_json(seeded, f"/api/persona/diff?a=1&b={version['version']}")
    assert any("Always answer in English" in line for line in diff["changes"])
    status, rolled = await send(seeded, "POST", "/api/persona/rollback", {"version": 1})
    assert status == 200
    assert rolled["state"]["hard_rules"] == []
    await chat(seeded, ["Hello once more."])
    assert "Always answer in English" not in persona_block(brain)
    assert "Never use emojis" not in persona_block(brain)

    status, _ = await send(seeded, "POST", "/api/persona/rollback", {"version": 999})
    assert status == 404
    status, _ = await send(seeded, "POST", "/api/persona/rollback", {"version": "one"})
    assert status == 400
    status, _ = await send(seeded, "POST", f"/api/persona/rules/{rule_id}/confirm")
    assert status == 400  # already decided
    await get_json(seeded, "/api/persona/diff?a=1", status=400)


async def test_observations_and_drift_api(seeded: RunningGateway) -> None:
    observations = (await get_json(seeded, "/api/observations"))["observations"]
    assert observations
    first = observations[0]
    assert {"priority", "category", "observed_at", "referred_on", "relative_phrase"} <= set(first)
    assert first["source_message_ids"]
    high = await get_json(seeded, "/api/observations?priority=high")
    assert all(o["priority"] == "high" for o in high["observations"])
    await get_json(seeded, "/api/observations?priority=urgent", status=400)
    await get_json(seeded, "/api/observations?since=yesterday", status=400)
    future = await get_json(seeded, "/api/observations?since=2999-01-01")
    assert future["observations"] == []

    drift = await get_json(seeded, "/api/drift")
    assert len(drift["points"]) == len(SEED_MESSAGES)
    assert [t[0] for t in drift["thresholds"]] == [0.7, 0.6, 0.5]
    assert drift["actions"]
    assert {a["kind"] for a in drift["actions"]} <= {
        "reinforce",
        "anchor",
        "rebase",
    }
    point = drift["points"][-1]
    assert point["reply"]
    assert point["ewma"] is not None
    conversation = point["conversation_id"]
    one = await get_json(seeded, f"/api/drift?conversation={conversation}")
    assert len(one["points"]) == len(SEED_MESSAGES)
    await get_json(seeded, "/api/drift?conversation=abc", status=400)


async def test_cross_site_changes_are_refused(seeded: RunningGateway) -> None:
    item = (await get_json(seeded, "/api/memory/items?limit=1"))["items"][0]
    path = f"/api/memory/items/{item['id']}/pin"
    status, answer = await send(seeded, "POST", path, Origin="https://evil.example")
    assert status == 403
    assert "cross-site" in answer
    status, _ = await send(seeded, "POST", path, Referer="https://evil.example/page")
    assert status == 403
    own = seeded.url("/panel/memory")
    status, _ = await send(seeded, "POST", path, Origin=own.rsplit("/panel", 1)[0])
    assert status == 200
    # Reading is never refused, wherever it comes from.
    async with seeded.session.get(
        seeded.url("/api/overview"), headers={"Origin": "https://evil.example"}
    ) as response:
        assert response.status == 200


@pytest.fixture
async def exposed(tmp_path: Path) -> AsyncIterator[tuple[RunningGateway, str]]:
    token = "panel-access-token-123"
    config = make_config(tmp_path, server={"host": "0.0.0.0", "access_token": token})
    server, session = await start_gateway(config, ScriptedBrain())
    try:
        yield RunningGateway(server, session), token
    finally:
        await session.close()
        await server.close()


async def test_panel_and_api_need_the_token_off_loopback(
    exposed: tuple[RunningGateway, str],
) -> None:
    running, token = exposed
    for path in ("/panel", "/panel/memory", "/panel/drift", "/api/overview", "/api/persona"):
        async with running.session.get(running.url(path)) as response:
            assert response.status == 401, path
        async with running.session.get(
            running.url(path), headers={"Authorization": f"Bearer {token}"}
        ) as response:
            assert response.status == 200, path


async def test_full_text_triggers_survive_every_migration(running: RunningGateway) -> None:
    # A batch migration on SQLite rebuilds a table and silently drops its triggers.
    async with running.gateway.store.session() as session:
        names = (
            await session.execute(
                text("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
            )
        ).scalars()
        assert {"memory_items_fts_delete", "memory_items_fts_insert"} <= set(names)
