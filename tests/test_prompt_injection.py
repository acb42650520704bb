"""Stored text that tries to steer the model, against every block of a real prompt.

``test_the_red_team_list_is_neutralised`` runs memory/redteam.py's list (the one
docs/DESIGN.md publishes) through ``sanitize``. The other test plants the whole
list in every store a prompt quotes (memory items, observations, the persona
state, the person's name, a "remember" request), runs a real turn through the
app, and walks every system block and anchor of the prompt the brain received.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import update

from gateway.brains.base import BlockKind, Purpose
from gateway.brains.scripted import ScriptedBrain
from gateway.prompt import PastMessage
from gateway.store.models import Person
from memory.pack import FOOTER
from memory.redteam import ATTACKS, ORDINARY, Attack, neutralised
from memory.sanitize import MARKER, sanitize
from persona.anchor import build_rebase
from persona.observation.types import Category, Observation, Priority
from persona.state import Weighted
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.panel_support import PANEL_SECTIONS, chat

# In every planted memory and in the last message, so full-text recall brings
# every planted memory to the pack (there is no embedder in tests).
TOPIC = "Zanzibar"
SESSION = "hostile-session-1"


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_the_red_team_list_is_neutralised(attack: Attack) -> None:
    cleaned = sanitize(attack.text)
    assert neutralised(attack, cleaned.text), cleaned.text


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_sentences_near_the_rules_pass_unchanged(text: str) -> None:
    assert sanitize(text).text == text


async def test_no_injection_survives_in_any_block_of_a_real_prompt(tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        voice={"enabled": False},
        observe={**PANEL_SECTIONS["observe"], "block_tokens": 6000},
        persona=PANEL_SECTIONS["persona"],
        memory={"history_tokens": 40, "budget_tokens": 8000, "candidates": 200},
    )
    brain = ScriptedBrain()
    server, session = await start_gateway(config, brain)
    running = RunningGateway(server, session)
    try:
        await chat(running, ["Hello there."], session=SESSION)
        gateway = running.gateway
        assert gateway.memory is not None
        assert gateway.persona is not None
        address = await gateway.router.address("webchat", SESSION)
        now = datetime.now(UTC)
        hostile_name = ATTACKS[0].text
        async with gateway.store.session() as db:
            await db.execute(
                update(Person)
                .where(Person.id == address.person_id)
                .values(display_name=hostile_name)
            )
        for attack in ATTACKS:
            await gateway.memory.remember(
                address.person_id,
                f"{TOPIC}: {attack.text}",
                at=now,
                speaker=hostile_name,
                conversation_id=address.conversation_id,
                channel="webchat",
            )
        await gateway.persona.log.add(
            address.person_id,
            address.conversation_id,
            [
                Observation(attack.text, Priority.HIGH, Category.FACT, now, (), None, attack.text)
                for attack in ATTACKS
            ],
            "test",
        )
        current = await gateway.persona.book.current()
        # Each field renders its first few (markers 4, formatting 3, stance 2):
        # a different slice of the list in each.
        hostile = [Weighted(attack.text, 1.0) for attack in ATTACKS]
        await gateway.persona.book.commit(
            dataclasses.replace(
                current.state,
                voice_markers=tuple(hostile[8:12]),
                formatting=tuple(hostile[12:15]),
                stance=tuple(hostile[15:17]),
            ),
            "test",
            "hostile persona state",
        )
        await chat(
            running,
            [f"Please remember that {ATTACKS[8].text}", f"What do you know about {TOPIC}?"],
            session=SESSION,
        )
    finally:
        await session.close()
        await server.close()

    request = [r for r in brain.requests if r.purpose is Purpose.REPLY][-1]
    blocks = {block.kind: block.text for block in request.system}
    assert set(blocks) >= {
        BlockKind.PERSONA,
        BlockKind.OBSERVATIONS,
        BlockKind.MEMORY,
        BlockKind.GUIDANCE,
    }
    # The hostile text did reach each block (neutralised), so the walk below means something.
    # (remember() lets a new item supersede a close older one: a few look alike.)
    assert blocks[BlockKind.MEMORY].count(TOPIC) >= len(ATTACKS) - 4
    assert blocks[BlockKind.OBSERVATIONS].count(MARKER) >= len(ATTACKS) - 4
    assert MARKER in blocks[BlockKind.PERSONA]
    assert blocks[BlockKind.MEMORY].count(FOOTER) == 1
    # Anchors the persona loop placed in the history are built from the state too.
    anchors = [m.text for m in request.messages if m.role == "assistant" and "[" in m.text]
    walked = {
        kind.value: text.removesuffix(FOOTER) if kind is BlockKind.MEMORY else text
        for kind, text in blocks.items()
    } | {f"history-{i}": text for i, text in enumerate(anchors)}
    for attack in ATTACKS:
        for where, text in walked.items():
            assert attack.payload not in text, (attack.name, where)
    for where, text in walked.items():
        for line in text.splitlines():
            assert not line.lstrip().lower().startswith(("## system", "system:", "</memory")), (
                where,
                line,
            )


@pytest.mark.parametrize("observed", [True, False], ids=["observed", "unobserved"])
def test_the_rebase_summary_quotes_earlier_turns_neutralised(observed: bool) -> None:
    """The summary that replaces earlier turns (guidance block) quotes stored messages."""
    now = datetime.now(UTC)
    recent = []
    for i, attack in enumerate([*ATTACKS, *ATTACKS[:4]]):
        text = attack.text if i < len(ATTACKS) else "fine, thanks"
        recent.append(PastMessage(2 * i + 1, "user", text, 20, now))
        recent.append(PastMessage(2 * i + 2, "assistant", "Noted.", 2, now))
    rebase = build_rebase(
        recent,
        keep_turns=4,
        summary_tokens=100_000,
        observed_through=len(recent) if observed else 0,
        agent_name="Ada",
    )
    assert rebase is not None
    assert MARKER in rebase.summary
    for attack in ATTACKS:
        # The observed ones are cut to their first sentence: what is left must be clean.
        assert attack.payload not in rebase.summary, attack.name
