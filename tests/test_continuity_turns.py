"""Working memory and the decision log through real turns (scripted brain, real store).

Through the running gateway: a focus said in chat is in the next turn's cached
prefix, and a reversed decision links to the one it reverses. On a fake clock
(the turn's arrival time is the clock): the focus fades after 14 days; the prefix
stays byte-identical between turns when nothing changed; only the last 10
decisions go in. Bad input is refused and changes nothing.
"""

from __future__ import annotations

import io
import json
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from sqlalchemy import Connection, func, select

from gateway.app import build_stages
from gateway.brains.base import BlockKind, BrainRequest
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.context import load_persona
from gateway.errors import InputError
from gateway.hub import ConversationHub
from gateway.pipeline import PipelineSettings, TurnPipeline
from gateway.prompt import TurnContext, TurnOutcome
from gateway.store import Store
from gateway.store.repo import Address, resolve_address, store_inbound
from gateway.tokens import estimate_tokens
from memory.continuity.book import DECISIONS_HEADER, FOCUS_HEADER, ContinuityBook
from memory.continuity.models import Decision, FocusEntry, Origin
from memory.continuity.stages import ContinuityListenStage, build_continuity
from tests.conftest import RunningGateway, make_config
from tests.test_lessons_turns import in_cached_prefix, persona_block, session
from tests.test_persona_loop import say

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path)


def book_of(running: RunningGateway) -> ContinuityBook:
    return ContinuityBook(running.gateway.store, running.gateway.config.continuity)


async def test_focus_said_in_chat_is_in_the_next_turns_cached_prefix(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    ws = await session(running, "focus-one")
    brain.script = ["Sure."]
    await say(ws, "Hi! Let's focus on the invoice export.", "f1")
    assert FOCUS_HEADER not in persona_block(brain.requests[-1])
    brain.script = ["On it."]
    await say(ws, "Where do we start?", "f2")
    request = brain.requests[-1]
    block = persona_block(request)
    assert f"{FOCUS_HEADER} (set today" in block
    assert "The invoice export" in block
    assert in_cached_prefix(request, "The invoice export")
    # The turn view lists the blocks that went in and their sizes.
    turns = await (await running.session.get(running.url("/api/turns"))).json()
    blocks = {b["stage"]: b["tokens"] for b in turns["turns"][0]["prompt_blocks"]}
    focus_text = next(part for part in block.split("\n\n") if part.startswith(FOCUS_HEADER))
    assert blocks["working-memory"] == estimate_tokens(focus_text)
    assert "decisions" not in blocks
    assert blocks["persona"] > 0
    await ws.close()


async def test_a_reversal_links_to_the_decision_it_reverses_and_both_are_in_the_prompt(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    ws = await session(running, "decide-one")
    brain.script = ["Good choice."]
    await say(ws, "We decided to use Postgres for the app.", "d1")
    brain.script = ["Fine."]
    await say(ws, "Hmm, actually let's go with SQLite instead.", "d2")
    brain.script = ["Noted."]
    await say(ws, "What's next?", "d3")
    async with running.gateway.store.reader() as s:
        rows = list(await s.scalars(select(Decision).order_by(Decision.id)))
    assert [(r.text, r.reverses_id) for r in rows] == [
        ("Use Postgres for the app", None),
        ("SQLite instead", rows[0].id),
    ]
    logged = await book_of(running).decisions(rows[0].person_id)
    assert logged[0].reversed_by == rows[1].id
    block = persona_block(brain.requests[-1])
    assert DECISIONS_HEADER in block
    assert f"#{rows[0].id} 2" in block
    assert f"Use Postgres for the app (reversed by #{rows[1].id})" in block
    assert f"SQLite instead (reverses #{rows[0].id})" in block
    assert in_cached_prefix(brain.requests[-1], "SQLite instead")
    await ws.close()


@dataclass
class Harness:
    store: Store
    brain: ScriptedBrain
    pipeline: TurnPipeline
    book: ContinuityBook

    async def say(self, address: Address, text: str, at: datetime) -> BrainRequest:
        inbound = await store_inbound(self.store, address, text, at, None)
        await self.pipeline.run(inbound, time.perf_counter())
        return self.brain.requests[-1]


@pytest.fixture
async def harness(config: Config, store: Store) -> Harness:
    brain = ScriptedBrain()
    parts = build_continuity(config.continuity, store)
    pipeline = TurnPipeline(
        store,
        brain,
        [
            *build_stages(config, persona=load_persona("", config.agent.name)),
            *parts.context_stages,
        ],
        ConversationHub(),
        PipelineSettings(max_tokens=200, temperature=None, timeout_s=5, history_max_messages=4),
        after_stages=[parts.after_stage],
    )
    return Harness(store, brain, pipeline, parts.book)


async def test_the_focus_fades_after_14_days_untouched_and_an_update_keeps_it(
    harness: Harness,
) -> None:
    sam = await resolve_address(harness.store, "webchat", "sam")
    await harness.say(sam, "I'm preparing for the Berlin marathon.", T0)
    three = persona_block(await harness.say(sam, "Any tips?", T0 + timedelta(days=3)))
    assert f"{FOCUS_HEADER} (set 3 days ago, on 2026-11-02):" in three
    assert "Preparing for the Berlin marathon" in three
    faded = persona_block(await harness.say(sam, "Hello again", T0 + timedelta(days=15)))
    assert "Berlin marathon" not in faded
    assert FOCUS_HEADER not in faded
    state = await harness.book.focus(sam.person_id, T0 + timedelta(days=15))
    assert state is not None
    assert state.faded
    assert state.idle_days == 15
    # An update touches it: back in the prompt, the update under it.
    await harness.book.update_focus(
        sam.person_id, "30 km long run done", origin=Origin.CLI, at=T0 + timedelta(days=16)
    )
    back = persona_block(await harness.say(sam, "Hi", T0 + timedelta(days=16)))
    assert "Preparing for the Berlin marathon" in back
    assert "- update 2026-11-18: 30 km long run done" in back
    assert "last touched today" in back
    # Not done with it: a word in common is not enough.
    await harness.say(sam, "I ran into Bob at the marathon expo.", T0 + timedelta(days=17))
    await harness.say(sam, "We finished the expo tour.", T0 + timedelta(days=17))
    assert await harness.book.focus(sam.person_id, T0 + timedelta(days=17)) is not None
    # Done with it: cleared from the conversation.
    await harness.say(sam, "I ran the Berlin marathon yesterday!", T0 + timedelta(days=20))
    assert await harness.book.focus(sam.person_id, T0 + timedelta(days=20)) is None


async def test_the_prefix_is_identical_between_turns_when_nothing_changed(
    harness: Harness,
) -> None:
    sam = await resolve_address(harness.store, "webchat", "sam")
    await harness.say(sam, "Let's focus on the tax return. We decided to file in March.", T0)
    first = await harness.say(sam, "ok", T0 + timedelta(hours=1))
    second = await harness.say(sam, "and then?", T0 + timedelta(hours=5))

    def prefix(request: BrainRequest) -> list[str]:
        marked = max(i for i, b in enumerate(request.system) if b.cache)
        return [b.text for b in request.system[: marked + 1]]

    assert "The tax return" in persona_block(first)
    assert "File in March" in persona_block(first)
    assert prefix(first) == prefix(second)
    # The fixed order inside the cached block: persona, working memory, decisions.
    block = persona_block(first)
    assert block.index(FOCUS_HEADER) < block.index(DECISIONS_HEADER)
    persona = load_persona("", "Ada").strip()
    assert block.startswith(persona[:60])
    assert first.system[0].kind is BlockKind.PERSONA


async def test_only_the_last_10_decisions_go_into_the_prompt(harness: Harness) -> None:
    sam = await resolve_address(harness.store, "webchat", "sam")
    for n in range(12):
        await harness.book.log_decision(
            sam.person_id, f"Decision number {n} stands", origin=Origin.CLI, at=T0
        )
    block = persona_block(await harness.say(sam, "hi", T0))
    assert "Decision number 0 stands" not in block
    assert "Decision number 1 stands" not in block
    assert all(f"Decision number {n} stands" in block for n in range(2, 12))
    assert len(await harness.book.decisions(sam.person_id)) == 12


async def test_bad_input_is_refused_and_changes_nothing(harness: Harness) -> None:
    sam = await resolve_address(harness.store, "webchat", "sam")
    huge = "x" * 10_000_000
    with pytest.raises(InputError, match="at most 400 characters"):
        await harness.book.set_focus(sam.person_id, huge, origin=Origin.CLI)
    with pytest.raises(InputError, match="at most 400 characters"):
        await harness.book.log_decision(sam.person_id, huge, origin=Origin.CLI)
    with pytest.raises(InputError, match="person 999 does not exist"):
        await harness.book.set_focus(999, "The invoice export", origin=Origin.CLI)
    with pytest.raises(InputError, match="person 999 does not exist"):
        await harness.book.log_decision(999, "Use Postgres", origin=Origin.CLI)
    with pytest.raises(InputError, match="no focus to update"):
        await harness.book.update_focus(sam.person_id, "progress", origin=Origin.CLI)
    with pytest.raises(InputError, match="tag"):
        await harness.book.log_decision(
            sam.person_id, "Use Postgres", tags=["two words"], origin=Origin.CLI
        )
    # A message as long as webchat takes (8,000 characters) naming a focus and a
    # decision far too long to keep: the turn ends, nothing kept.
    await harness.say(sam, "We decided to use " + "x" * 3900 + ". Let's focus on " + "y" * 3900, T0)
    async with harness.store.reader() as s:
        assert await s.scalar(select(func.count()).select_from(FocusEntry)) == 0
        assert await s.scalar(select(func.count()).select_from(Decision)) == 0
    # A long one within a sentence's reach but past max_chars: refused, the turn fine.
    await harness.say(sam, "Let's focus on " + "the very long plan " * 30, T0)
    async with harness.store.reader() as s:
        assert await s.scalar(select(func.count()).select_from(FocusEntry)) == 0


async def test_the_panel_api_refuses_bad_input_and_changes_nothing(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    ws = await session(running, "focus-api-one")
    brain.script = ["Hi."]
    await say(ws, "Hello.", "a1")
    await ws.close()
    state = await (await running.session.get(running.url("/api/focus"))).json()
    person = state["person"]
    assert state["focus"]["focus"] is None
    huge = json.dumps({"text": "x" * 10_000_000, "person_id": person}).encode()
    for path in ("/api/focus", "/api/decisions"):
        response = await running.session.post(
            running.url(path), data=io.BytesIO(huge), headers={"Content-Type": "application/json"}
        )
        assert response.status == 413  # past the server's body limit, before any parsing
        response = await running.session.post(
            running.url(path), json={"text": "y" * 401, "person_id": person}
        )
        assert response.status == 400
        assert "at most 400 characters" in (await response.json())["error"]["message"]
        response = await running.session.post(
            running.url(path), json={"text": "Use Postgres", "person_id": 999}
        )
        assert response.status == 404
        assert "person 999 does not exist" in (await response.json())["error"]["message"]
    response = await running.session.get(running.url("/api/focus?person=999"))
    assert response.status == 404
    after = await (await running.session.get(running.url("/api/focus"))).json()
    assert after == state


class TopicEmbedder:
    """Vectors on two axes, databases and places, and a dimension of each text's own
    (so two texts on neither axis are not alike): enough to tell subjects apart."""

    AXES = (("postgres", "sqlite", "database", "mysql"), ("lisbon", "berlin", "offsite"))

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        rows = []
        for text in texts:
            low = text.lower()
            row = np.zeros(2 + 64, dtype=np.float32)
            row[:2] = [float(any(w in low for w in axis)) for axis in self.AXES]
            row[2 + zlib.crc32(low.encode()) % 64] = 0.3
            rows.append(row / np.linalg.norm(row))
        return np.stack(rows)


async def test_a_reversal_links_by_shared_words_or_similarity_never_to_another_subject(
    harness: Harness,
) -> None:
    sam = await resolve_address(harness.store, "webchat", "sam")
    book = harness.book
    launch = await book.log_decision(sam.person_id, "The launch is in May", origin=Origin.CLI)
    db = await book.log_decision(sam.person_id, "Use Postgres", origin=Origin.CLI)
    place = await book.log_decision(sam.person_id, "The offsite is in Lisbon", origin=Origin.CLI)
    # Shared content word ("launch"), another conversation: linked to that one.
    assert await book.reversed_one(sam.person_id, "Move the launch to June") == launch.decision_id
    # No shared word and no embedding model: not linked (the newest is no guess).
    assert await book.reversed_one(sam.person_id, "SQLite") is None
    similar = ContinuityBook(harness.store, book.config, TopicEmbedder())
    assert await similar.reversed_one(sam.person_id, "SQLite") == db.decision_id
    assert await similar.reversed_one(sam.person_id, "Berlin") == place.decision_id
    assert await similar.reversed_one(sam.person_id, "Tea for breakfast") is None


async def test_instead_links_only_to_a_decision_said_just_before(harness: Harness) -> None:
    sam = await resolve_address(harness.store, "webchat", "sam")
    await harness.say(sam, "We decided the offsite is in Lisbon.", T0)
    for n in range(3):
        await harness.say(sam, f"Unrelated chat number {n}.", T0 + timedelta(minutes=n + 1))
    await harness.say(sam, "Actually, let's go with SQLite instead.", T0 + timedelta(minutes=9))
    await harness.say(sam, "We decided to use Postgres.", T0 + timedelta(minutes=10))
    await harness.say(sam, "Hmm, let's go with MySQL instead.", T0 + timedelta(minutes=11))
    logged = await harness.book.decisions(sam.person_id)
    assert [(d.text, d.reverses_id) for d in logged] == [
        ("The offsite is in Lisbon", None),
        ("SQLite instead", None),
        ("Use Postgres", None),
        ("MySQL instead", logged[2].decision_id),
    ]


async def test_the_listener_reads_no_focus_for_a_message_that_names_none(
    harness: Harness, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most messages state no focus or decision: the listener then reads nothing (the
    rules run first); a message that does still reads the current focus."""
    address = await resolve_address(store, "webchat", "listener-quiet")
    inbound = await store_inbound(store, address, "Let's focus on the invoice export.", T0, None)
    listener = ContinuityListenStage(harness.book)
    reads: list[object] = []
    read = store.read

    async def counted(work: Callable[[Connection], Any]) -> Any:
        reads.append(work)
        return await read(work)

    monkeypatch.setattr(store, "read", counted)
    turn = TurnContext(
        turn_id=inbound.turn_id,
        conversation_id=address.conversation_id,
        person_id=address.person_id,
        channel="webchat",
        message_id=inbound.message_id,
        text="What is the weather like today?",
        received_at=T0,
    )
    await listener.after_turn(turn, TurnOutcome(None))
    assert reads == []
    await listener.after_turn(
        replace(turn, text="Let's focus on the invoice export."), TurnOutcome(None)
    )
    assert reads
    assert await harness.book.focus(address.person_id, T0) is not None
