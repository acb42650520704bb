"""/metrics after real turns, /readyz, the stage events and the JSON log ids."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.brains.scripted import ScriptedBrain
from gateway.events import StageEvent, StageKind, StagePhase
from gateway.prompt import TurnContext, TurnOutcome
from gateway.runtime import GATEWAY
from gateway.startup import configure_logging
from gateway.store import Store
from gateway.store.repo import resolve_address
from tests.conftest import RunningGateway, make_config
from tests.test_memory_models import (
    GatedEmbedder,
    embedder,  # noqa: F401 (the session's loaded model, a fixture)
    ingest_lines,
    service_for,
)
from tests.test_webchat_turn import receive_until

TOKEN = "correct-horse-battery-staple"


async def scrape(
    session: aiohttp.ClientSession, url: str
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] from a /metrics answer, parsed by prometheus_client."""
    async with session.get(url) as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        text = await response.text()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    return sum(
        v for got, v in samples.get(name, []) if all(got.get(k) == x for k, x in labels.items())
    )


async def talk(running: RunningGateway, brain: ScriptedBrain, texts: list[str]) -> None:
    brain.script = [f"Answer {i}." for i in range(len(texts))]
    ws = await running.ws("metrics-session")
    await receive_until(ws, "history")
    for i, text in enumerate(texts):
        await ws.send_json({"type": "message", "text": text, "client_id": f"c-{i}"})
        await receive_until(ws, "reply")
    await ws.close()
    # The after-turn stages of the last turn run after its reply went out.
    assert await running.gateway.router.drain(timeout=20)


async def test_metrics_move_with_real_turns(running: RunningGateway, brain: ScriptedBrain) -> None:
    before = await scrape(running.session, running.url("/metrics"))
    assert value(before, "agentgw_turns_total") == 0
    await talk(running, brain, ["hello", "and again"])
    after = await scrape(running.session, running.url("/metrics"))

    assert value(after, "agentgw_turns_total", outcome="ok", channel="webchat") == 2
    assert value(after, "agentgw_turn_seconds_count", channel="webchat") == 2
    pipeline = running.gateway.pipeline
    assert pipeline is not None
    # Every context stage, the brain (first token and end), deliver and every after-turn stage.
    for stage in pipeline.stages:
        assert (
            value(after, "agentgw_turn_stage_seconds_count", phase="context", stage=stage.name) == 2
        )
    for phase in ("prepare", "brain_first_token", "brain", "deliver"):
        assert value(after, "agentgw_turn_stage_seconds_count", phase=phase) == 2, phase
    for stage in pipeline.after_stages:
        assert (
            value(after, "agentgw_turn_stage_seconds_count", phase="after_turn", stage=stage.name)
            == 2
        )
    assert value(after, "agentgw_tokens_total", direction="output") > 0
    assert value(after, "agentgw_ready") == 1
    assert value(after, "agentgw_memory_items") > 0  # the turns' episodes, counted by tier

    # No person, conversation or message ids among the labels.
    gateway = running.gateway
    async with gateway.store.session() as db:
        from sqlalchemy import select

        from gateway.store import Turn

        turns = (await db.scalars(select(Turn))).all()
    ids = {str(t.id) for t in turns} | {str(t.conversation_id) for t in turns}
    names = {
        "person",
        "person_id",
        "conversation",
        "conversation_id",
        "turn",
        "turn_id",
        "message_id",
    }
    for series in after.values():
        for labels, _ in series:
            assert not names & set(labels), labels
            assert not ids & set(labels.values()), labels


async def test_a_failing_after_turn_stage_is_counted_with_its_code(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    class Broken:
        name = "broken_stage"

        async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
            raise RuntimeError("disk on fire")

    pipeline = running.gateway.pipeline
    assert pipeline is not None
    pipeline.after_stages = (*pipeline.after_stages, Broken())
    seen: list[StageEvent] = []
    running.gateway.hub.subscribe_stages(seen.append)
    await talk(running, brain, ["hi"])
    samples = await scrape(running.session, running.url("/metrics"))
    assert (
        value(
            samples,
            "agentgw_stage_errors_total",
            phase="after_turn",
            stage="broken_stage",
            code="after_turn_failed",
        )
        == 1
    )
    # The typed events: each stage starts then ends; the broken one ends in an error.
    kinds = [(e.phase, e.stage, e.kind) for e in seen]
    assert (StagePhase.AFTER_TURN, "broken_stage", StageKind.ERROR) in kinds
    assert kinds[0] == (StagePhase.TURN, "turn", StageKind.START)
    starts = [k[:2] for k in kinds if k[2] is StageKind.START]
    ends = [k[:2] for k in kinds if k[2] is not StageKind.START]
    for started in starts:
        assert started in ends, started


async def test_a_failed_turn_is_counted_by_its_code(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    brain.script = [""]  # an empty answer: the turn fails as empty_reply
    ws = await running.ws("metrics-fail")
    await receive_until(ws, "history")
    await ws.send_json({"type": "message", "text": "hi", "client_id": "c-1"})
    await receive_until(ws, "error")
    await ws.close()
    samples = await scrape(running.session, running.url("/metrics"))
    assert value(samples, "agentgw_turns_total", outcome="empty_reply", channel="webchat") == 1
    assert value(samples, "agentgw_turns_total", outcome="ok") == 0


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[TestServer]:
    config = make_config(
        tmp_path, server={"host": "0.0.0.0", "access_token": TOKEN}, voice={"enabled": False}
    )
    server = TestServer(create_app(config, brain=ScriptedBrain()), host="127.0.0.1")
    await server.start_server()
    await server.app[GATEWAY].ready.wait()
    try:
        yield server
    finally:
        await server.close()


async def test_metrics_need_the_token_off_loopback_and_readyz_does_not(remote: TestServer) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(remote.make_url("/metrics")) as response:
            assert response.status == 401
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with session.get(remote.make_url("/metrics"), headers=headers) as response:
            assert response.status == 200
            assert "# TYPE agentgw_turn_stage_seconds histogram" in await response.text()
        async with session.get(remote.make_url("/readyz")) as response:
            assert response.status == 200
            assert (await response.json())["status"] == "ok"


async def test_readyz_reports_its_checks(running: RunningGateway) -> None:
    async with running.session.get(running.url("/readyz")) as response:
        body = await response.json()
    assert response.status == 200
    assert body["status"] == "ok"
    assert body["checks"]["store"]["ok"] is True
    migrations = body["checks"]["migrations"]
    assert migrations["ok"] is True
    assert migrations["current"] == migrations["head"] is not None
    assert body["checks"]["brain"]["ok"] is True


async def test_readyz_is_degraded_with_an_offline_brain_nobody_chose(tmp_path: Path) -> None:
    # brain.kind "auto" with no key and no server: the offline brain stands in.
    config = make_config(tmp_path, voice={"enabled": False})
    server = TestServer(create_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        await server.app[GATEWAY].ready.wait()
        async with (
            aiohttp.ClientSession() as session,
            session.get(server.make_url("/readyz")) as response,
        ):
            body = await response.json()
        assert response.status == 200
        assert body["status"] == "degraded"
        assert body["degraded"] == {"brain": "offline: no model is configured"}
        assert body["checks"]["brain"]["ok"] is False
    finally:
        await server.close()


async def test_readyz_is_degraded_while_a_reembedding_pass_runs(
    tmp_path: Path,
    embedder: object,  # noqa: F811
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"}, voice={"enabled": False})
    async with Store(config.database_url) as store:
        sam = await resolve_address(store, "webchat", "ready-wait-1", display_name="Sam")
        service = service_for(store, config, embedder)  # type: ignore[arg-type]
        await ingest_lines(service, sam)
        await service.aclose()

    gated = GatedEmbedder(embedder)  # type: ignore[arg-type]
    server = TestServer(create_app(config, brain=ScriptedBrain(), embedder=gated), host="127.0.0.1")
    await server.start_server()
    try:
        await server.app[GATEWAY].ready.wait()
        async with aiohttp.ClientSession() as session:
            async with session.get(server.make_url("/readyz")) as response:
                body = await response.json()
            assert response.status == 200
            assert body["status"] == "degraded"
            assert body["degraded"] == {"people_being_embedded": 1}
            samples = await scrape(session, str(server.make_url("/metrics")))
            assert value(samples, "agentgw_memory_reembedding_people") == 1

            gated.gate.set()
            memory = server.app[GATEWAY].memory
            assert memory is not None
            await memory.reembedded()
            async with session.get(server.make_url("/readyz")) as response:
                assert (await response.json())["status"] == "ok"
    finally:
        gated.gate.set()
        await server.close()


async def test_json_log_lines_carry_the_turns_ids(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream)
    try:
        await talk(running, brain, ["hello"])
    finally:
        logging.basicConfig(force=True, handlers=[logging.NullHandler()])
    entries = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    in_turn = [e for e in entries if "turn_id" in e]
    assert in_turn, entries
    turn_ids = {e["turn_id"] for e in in_turn}
    assert len(turn_ids) == 1
    assert all(isinstance(e["conversation_id"], int) and "person_id" in e for e in in_turn)
    (turn_id,) = turn_ids
    # The ids are fields, not text: no line's message was rewritten to hold them.
    assert any(e.get("stage") for e in in_turn), in_turn
    assert all(f"turn_id={turn_id}" not in e["message"] for e in in_turn)


async def test_the_panel_system_page_shows_the_same_numbers(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    await talk(running, brain, ["hello", "again"])
    async with running.session.get(running.url("/api/system")) as response:
        data = await response.json()
    assert data["turns"] == {"ok (webchat)": 2}
    assert data["readiness"]["status"] == "ok"
    brain_row = next(s for s in data["stages"] if s["phase"] == "brain")
    assert brain_row["count"] == 2
    assert brain_row["mean_ms"] is not None
    async with running.session.get(running.url("/panel/system")) as response:
        html = await response.text()
    assert response.status == 200
    assert "ok (webchat): <strong>2</strong>" in html
    # The CSP forbids inline script and style: only the panel's own files.
    assert "<style" not in html
    assert "<script>" not in html
