"""The anchor planner: actions by tier and turn, anchor placement, rebase content,
and the guard that keeps unobserved messages in the prompt."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.brains.base import BlockKind
from gateway.prompt import HistoryEntry, PastMessage, PromptDraft, TurnContext
from gateway.store import Store
from gateway.store.repo import finish_turn, resolve_address, store_inbound
from persona.anchor import (
    NOTE_OPEN,
    PlannerSettings,
    anchor_positions,
    build_rebase,
    place_anchors,
    plan,
    strip_notes,
    wrap_note,
)
from persona.judge import DriftState, Tier, Trend
from persona.models import ActionKind, PersonaAction
from persona.observation.log import ObservationLog
from persona.stages import AnchorStage, restore_unobserved
from persona.state import HardRule, PersonaBook, PersonaState, Weighted

SETTINGS = PlannerSettings(warmup_turns=3, anchor_min_messages=6, rebase_cooldown_turns=5)
T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def drift(ewma: float | None, tier: Tier, trend: Trend = Trend.DRIFTING) -> DriftState:
    return DriftState(ewma, tier, trend, 5)


def past(n: int, *, start: int = 1) -> list[PastMessage]:
    messages = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"{role} message {start + i}"
        messages.append(PastMessage(start + i, role, text, 5, T0 + timedelta(minutes=i)))
    return messages


def chat(messages: list[PastMessage]) -> list[HistoryEntry]:
    # As the history stage leaves them: each entry with its stored message's id.
    return [HistoryEntry(m.role, m.text, m.message_id) for m in messages]


@pytest.mark.parametrize(
    ("state", "history", "since", "expected"),
    [
        (drift(0.8, Tier.OK), 20, None, None),
        (drift(0.65, Tier.MILD), 20, None, ActionKind.REINFORCE),
        (drift(0.55, Tier.MODERATE), 20, None, ActionKind.ANCHOR),
        (drift(0.55, Tier.MODERATE), 4, None, ActionKind.REINFORCE),  # short history
        (drift(0.4, Tier.SEVERE), 20, None, ActionKind.REBASE),
        (drift(0.4, Tier.SEVERE), 20, 2, ActionKind.ANCHOR),  # cooling down after a rebase
        (drift(0.4, Tier.SEVERE), 20, 5, ActionKind.REBASE),
        (drift(None, Tier.OK), 20, None, None),
    ],
)
def test_plan_by_tier(
    state: DriftState, history: int, since: int | None, expected: ActionKind | None
) -> None:
    decision = plan(
        SETTINGS, turn_number=10, drift=state, history_messages=history, turns_since_rebase=since
    )
    assert decision.kind is expected


def test_no_action_in_the_warm_up_turns_and_periodic_anchors() -> None:
    severe = drift(0.3, Tier.SEVERE)
    assert (
        plan(
            SETTINGS, turn_number=3, drift=severe, history_messages=20, turns_since_rebase=None
        ).kind
        is None
    )
    periodic = PlannerSettings(periodic_anchor_turns=10, anchor_min_messages=6)
    ok = drift(0.9, Tier.OK, Trend.STABLE)
    kinds = [
        plan(periodic, turn_number=n, drift=ok, history_messages=20, turns_since_rebase=None).kind
        for n in (19, 20, 21)
    ]
    assert kinds == [None, ActionKind.ANCHOR, None]


def test_anchors_sit_on_user_messages_at_a_third_and_two_thirds() -> None:
    history = chat(past(30))
    positions = anchor_positions(history)
    assert positions == [10, 20]
    assert all(history[i].role == "user" for i in positions)
    placed, where = place_anchors(history, "Stay Ada.")
    assert where == [10, 20]
    assert placed[10].text.startswith(NOTE_OPEN)
    assert placed[10].text.endswith("user message 11")
    assert [m.role for m in placed] == [m.role for m in history]  # alternation intact
    assert sum(NOTE_OPEN in m.text for m in placed) == 2
    assert strip_notes(placed[10].text) == "user message 11"


def test_anchor_text_is_50_to_100_tokens_from_the_state() -> None:
    state = PersonaState(
        traits={"directness": 0.8, "verbosity": 0.2, "warmth": 0.7, "formality": 0.3},
        formatting=(Weighted("plain paragraphs", 0.9),),
        hard_rules=(HardRule(1, "Never use emojis"),),
    )
    anchor = state.render_anchor(50, 100, "Ada")
    tokens = (len(anchor) + 3) // 4
    assert 50 <= tokens <= 100
    assert "Never use emojis" in anchor
    assert "direct" in anchor
    assert "brief" in anchor
    assert len(state.render_reinforcement(40)) <= 160


def test_rebase_keeps_the_last_k_turns_and_condenses_the_rest() -> None:
    recent = past(20)  # ten turns: user 1, assistant 2, ..., assistant 20
    rebase = build_rebase(
        recent, keep_turns=4, summary_tokens=400, observed_through=14, agent_name="Ada"
    )
    assert rebase is not None
    assert [m.message_id for m in rebase.kept] == list(range(13, 21))  # last 4 turns
    assert rebase.base_message_id == 13
    assert rebase.summarized_ids == tuple(range(1, 13))
    # Nothing observed after message 14 is summarised here, and 13+ are kept whole.
    assert rebase.unobserved_in_summary == ()
    assert "The person: user message 1" in rebase.summary
    assert "Ada: assistant message 12" in rebase.summary

    unobserved = build_rebase(
        recent, keep_turns=4, summary_tokens=10, observed_through=8, agent_name="Ada"
    )
    assert unobserved is not None
    # Over the budget, but messages 9-12 were never observed: they are carried whole.
    assert unobserved.unobserved_in_summary == (9, 10, 11, 12)
    for n in (9, 10, 11, 12):
        assert f"message {n}" in unobserved.summary
    assert (
        build_rebase(past(6), keep_turns=4, summary_tokens=400, observed_through=0, agent_name="A")
        is None
    )


def test_unobserved_messages_are_put_back_into_the_history() -> None:
    recent = past(12)
    # The history stage kept only the last four messages (budget).
    trimmed = chat(recent[-4:])
    entries, restored = restore_unobserved(recent, trimmed, observed_through=6)
    assert restored == [7, 8]
    assert [e.message_id for e in entries] == [7, 8, 9, 10, 11, 12]
    # Observed messages may go; an unobserved assistant reply brings its question along.
    entries, restored = restore_unobserved(recent, trimmed, observed_through=7)
    assert restored == [8]
    assert [e.message_id for e in entries] == [7, 8, 9, 10, 11, 12]
    assert entries[0].role == "user"
    # Nothing to restore when all is observed.
    entries, restored = restore_unobserved(recent, trimmed, observed_through=12)
    assert restored == []
    assert len(entries) == 4


def test_notes_are_stripped_wherever_they_are_echoed() -> None:
    text = f"before {wrap_note('Stay Ada.')} after"
    assert " ".join(strip_notes(text).split()) == "before after"
    # A note cut off before its end marker is stripped to the end of the text.
    assert strip_notes(f"hello {wrap_note('Stay Ada.')[:40]}") == "hello"


async def test_a_standing_rebase_holds_until_the_history_moves_past_it(tmp_path: Path) -> None:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'anchor.db'}") as store:
        address = await resolve_address(store, "webchat", "anchor-stage")
        stored = []
        for n in range(6):
            inbound = await store_inbound(
                store, address, f"question {n}", T0 + timedelta(minutes=n), None
            )
            reply = await finish_turn(store, inbound, f"answer {n}", {})
            stored.extend(
                [
                    (inbound.message_id, "user", f"question {n}"),
                    (reply.id, "assistant", f"answer {n}"),
                ]
            )
        last = await store_inbound(store, address, "question 6", T0 + timedelta(hours=1), None)
        recent = tuple(PastMessage(i, role, text, 3, T0) for i, role, text in stored)  # type: ignore[arg-type]
        base = stored[6][0]  # "question 3"
        async with store.session() as session:
            session.add(
                PersonaAction(
                    turn_id=last.turn_id,
                    conversation_id=address.conversation_id,
                    kind=ActionKind.REBASE,
                    tier="severe",
                    detail={
                        "summary": "SUMMARY OF EARLIER TURNS",
                        "base_message_id": base,
                        "turn_number": 6,
                    },
                )
            )
        log = ObservationLog(store)
        await log.advance(address.conversation_id, stored[-1][0])  # all observed
        stage = AnchorStage(
            store, log, PersonaBook(store, PersonaState(traits={})), SETTINGS, "Ada"
        )
        turn = TurnContext(
            turn_id=last.turn_id + 1,
            conversation_id=address.conversation_id,
            person_id=address.person_id,
            channel="webchat",
            message_id=last.message_id,
            text="question 6",
            received_at=T0,
            recent=recent,
        )
        holding = PromptDraft(history=chat(list(recent)))
        await stage.apply(turn, holding)
        assert "SUMMARY OF EARLIER TURNS" in "\n".join(holding.blocks.get(BlockKind.GUIDANCE, []))
        assert holding.history[0].text == "question 3"  # earlier ones rebased away

        moved_on = PromptDraft(history=chat(list(recent[-4:])))  # the budget dropped the base
        await stage.apply(turn, moved_on)
        assert BlockKind.GUIDANCE not in moved_on.blocks
        assert moved_on.history[0].text == "question 4"


def test_a_message_the_pack_holds_is_not_put_back_into_the_history() -> None:
    recent = past(12)
    trimmed = chat(recent[-4:])
    # Messages 7 and 8 are unobserved and out of the budget; the pack already holds 8.
    entries, restored = restore_unobserved(recent, trimmed, observed_through=6, packed={8})
    assert restored == [7]
    assert [e.message_id for e in entries] == [7, 9, 10, 11, 12]
