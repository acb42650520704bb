"""The persona loop through real webchat turns: a stored SyncScore after each reply,
observations in the next prompt, and anchors fired by drift and stored with their turn."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import select

from gateway.brains.base import BlockKind, BrainRequest
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.store.models import Turn
from persona.anchor import NOTE_OPEN, REBASE_PREFIX, REINFORCE_PREFIX
from persona.loop import PersonaLoop
from persona.models import ActionKind, ObservationRow, PersonaAction, SyncScoreRow, VerdictStatus
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.test_webchat_turn import receive_until

OFF_VOICE = (
    "Great question!!! I'm absolutely thrilled to help with this wonderful request! 🎉🎉 "
    "Furthermore, it is important to note that there are numerous factors to consider. "
    "Moreover, each factor shall be examined comprehensively in accordance with best practices, "
    "and consequently I would like to take this opportunity to thank you for your inquiry.\n\n"
    "## Overview\n- **Point one**\n- **Point two**\n- **Point three**\n\n## Conclusion\n"
    "In conclusion, do not hesitate to reach out should you require further assistance! 🚀"
)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(
        tmp_path,
        observe={"observer_tokens": 10},
        persona={"warmup_turns": 1, "anchor_min_messages": 4},
    )


def system(request: BrainRequest, kind: BlockKind) -> str:
    return "\n\n".join(b.text for b in request.system if b.kind is kind)


async def say(ws: aiohttp.ClientWebSocketResponse, text: str, client_id: str) -> str:
    await ws.send_json({"type": "message", "text": text, "client_id": client_id})
    frames = await receive_until(ws, "reply")
    return str(frames[-1]["text"])


async def settle(running: RunningGateway) -> None:
    """Wait for the turn's lane (which starts the judge and observer), then for those tasks."""
    assert await running.gateway.router.drain(30)
    assert await loop_of(running).idle(30)


def loop_of(running: RunningGateway) -> PersonaLoop:
    loop = running.gateway.persona
    assert loop is not None
    return loop


async def test_turn_is_scored_and_observed_and_the_next_prompt_carries_it(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    brain.script = ["Noted: Ana's birthday is on 14 June. I'll keep it in mind."]
    ws = await running.ws("persona-loop-1")
    await ws.receive_json(timeout=5)
    await ws.receive_json(timeout=5)
    await say(ws, "Please remember that my sister Ana's birthday is on 14 June.", "c1")
    await settle(running)

    loop = loop_of(running)
    async with loop.store.session() as session:
        verdict = (await session.scalars(select(SyncScoreRow))).one()
        observations = (await session.scalars(select(ObservationRow))).all()
    assert verdict.status is VerdictStatus.SCORED
    assert verdict.judge == "local"
    assert verdict.composite is not None
    assert verdict.ewma == verdict.composite
    assert verdict.reply_message_id is not None
    assert verdict.tier == "ok"
    assert {o.priority for o in observations} >= {"high"}
    assert any("Ana's birthday" in o.text for o in observations)

    brain.script = ["Sure."]
    await say(ws, "What should I get her?", "c2")
    second = brain.requests[-1]
    block = system(second, BlockKind.OBSERVATIONS)
    assert "Ana's birthday is on 14 June" in block
    assert "(refers to 2" in block
    # The observations block sits in the cached prefix, after the persona.
    kinds = [b.kind for b in second.system]
    assert kinds.index(BlockKind.PERSONA) < kinds.index(BlockKind.OBSERVATIONS)
    assert second.system[kinds.index(BlockKind.OBSERVATIONS)].cache
    assert "Your measured voice:" in system(second, BlockKind.PERSONA)
    await ws.close()


async def test_drift_fires_actions_that_reach_the_prompt_and_are_stored(
    tmp_path: Path, brain: ScriptedBrain
) -> None:
    config = make_config(
        tmp_path,
        persona={"warmup_turns": 1, "anchor_min_messages": 4, "rebase_keep_turns": 2},
    )
    server, session = await start_gateway(config, brain)
    running = RunningGateway(server, session)
    try:
        loop = loop_of(running)
        rule = await loop.book.propose_rule("Never use emojis")
        await loop.book.confirm_rule(rule.rule_id)
        ws = await running.ws("persona-loop-2")
        await ws.receive_json(timeout=5)
        await ws.receive_json(timeout=5)
        for n in range(5):
            brain.script = [OFF_VOICE]
            await say(ws, f"Can you help me plan the week, part {n}?", f"d{n}")
            await settle(running)
        await ws.close()
        async with loop.store.session() as db:
            verdicts = (await db.scalars(select(SyncScoreRow).order_by(SyncScoreRow.id))).all()
            actions = (await db.scalars(select(PersonaAction).order_by(PersonaAction.id))).all()
            turns = (await db.scalars(select(Turn.id).order_by(Turn.id))).all()
    finally:
        await session.close()
        await server.close()

    # The emoji breaks the confirmed rule: every reply is judged severe.
    assert len(verdicts) == 5
    assert all(v.tier == "severe" for v in verdicts)
    assert verdicts[0].detail["rules"] == [{"rule": "Never use emojis", "kept": False}]
    # Turn 1 is warm-up; turns 2 and 3 have no more than K=2 earlier turns, too few to
    # rebase (reinforce); turn 4 rebases; then it cools down and anchors go in the history.
    kinds = [(turns.index(a.turn_id) + 1, a.kind) for a in actions]
    assert kinds == [
        (2, ActionKind.REINFORCE),
        (3, ActionKind.REINFORCE),
        (4, ActionKind.REBASE),
        (5, ActionKind.ANCHOR),
    ]
    rebase_prompt = brain.requests[3]
    assert REBASE_PREFIX in system(rebase_prompt, BlockKind.GUIDANCE)
    assert "Never use emojis" in system(rebase_prompt, BlockKind.PERSONA)
    # The history keeps only the last K=2 turns; the new message follows them.
    assert [m.text for m in rebase_prompt.messages if m.role == "user"] == [
        "Can you help me plan the week, part 1?",
        "Can you help me plan the week, part 2?",
        "Can you help me plan the week, part 3?",
    ]
    assert actions[2].detail["summarized_ids"]
    assert actions[2].detail["base_message_id"]
    anchored = brain.requests[4]
    assert REBASE_PREFIX in system(anchored, BlockKind.GUIDANCE)  # the rebase holds
    assert sum(NOTE_OPEN in m.text for m in anchored.messages) == len(
        actions[3].detail["positions"]
    )
    assert REINFORCE_PREFIX in system(anchored, BlockKind.GUIDANCE)
    assert all(a.ewma is not None and a.tier == "severe" for a in actions)
    assert actions[3].tokens >= 50
