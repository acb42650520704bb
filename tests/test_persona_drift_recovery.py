"""The drift loop's recovery options (issue 28): anchors at once while a mild drift is
still falling, an EWMA restarted by a rebase, and a faster λ on the way back up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.store import Store
from gateway.store.repo import resolve_address, store_inbound
from persona.anchor import PlannerSettings, plan
from persona.judge import DriftState, SyncPolicy, SyncScorer, Tier, Trend
from persona.models import ActionKind, PersonaAction
from tests.test_persona_judge import WEIGHTS, FixedJudge, item, state_with_rules


def mild(trend: Trend) -> DriftState:
    return DriftState(0.65, Tier.MILD, trend, 10)


@pytest.mark.parametrize(
    ("escalate", "trend", "history", "expected"),
    [
        (False, Trend.DRIFTING, 20, ActionKind.REINFORCE),
        (True, Trend.DRIFTING, 20, ActionKind.ANCHOR),
        # Mild and already recovering: the reinforcement is enough.
        (True, Trend.RECOVERING, 20, ActionKind.REINFORCE),
        (True, Trend.STABLE, 20, ActionKind.REINFORCE),
        # Too short a history to hold anchors.
        (True, Trend.DRIFTING, 4, ActionKind.REINFORCE),
    ],
)
def test_a_mild_drift_still_falling_is_anchored_at_once(
    escalate: bool, trend: Trend, history: int, expected: ActionKind
) -> None:
    settings = PlannerSettings(anchor_min_messages=6, escalate_when_falling=escalate)
    decision = plan(
        settings,
        turn_number=10,
        drift=mild(trend),
        history_messages=history,
        turns_since_rebase=None,
    )
    assert decision.kind is expected


def test_lambda_recovering_moves_only_a_rising_ewma_faster() -> None:
    policy = SyncPolicy(weights=WEIGHTS, score_lambda=0.3, lambda_recovering=0.6)
    assert policy.ewma(0.5, 0.9) == pytest.approx(0.6 * 0.9 + 0.4 * 0.5)
    # Falling: the ordinary λ, so a noisy low score raises no earlier alarm.
    assert policy.ewma(0.9, 0.5) == pytest.approx(0.3 * 0.5 + 0.7 * 0.9)
    same = SyncPolicy(weights=WEIGHTS, score_lambda=0.3)
    assert same.ewma(0.5, 0.9) == pytest.approx(0.3 * 0.9 + 0.7 * 0.5)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'recovery.db'}") as opened:
        yield opened


@pytest.mark.parametrize("reseed", [False, True])
async def test_the_first_verdict_after_a_rebase_restarts_the_ewma(
    store: Store, reseed: bool
) -> None:
    address = await resolve_address(store, "webchat", "recovery-test")
    turns = [
        (await store_inbound(store, address, f"m{n}", datetime.now(UTC), None)).turn_id
        for n in range(4)
    ]
    # The third turn's prompt was a rebase (the planner stored it with the turn).
    async with store.session() as session:
        session.add(
            PersonaAction(
                turn_id=turns[2],
                conversation_id=address.conversation_id,
                kind=ActionKind.REBASE,
                tier="severe",
                ewma=0.35,
            )
        )
    policy = SyncPolicy(weights=WEIGHTS, reseed_after_rebase=reseed)
    scorer = SyncScorer(store, FixedJudge([0.4, 0.3, 0.85, 0.8]), policy)
    state = state_with_rules()
    ewmas = []
    for turn_id in turns:
        verdict = await scorer.score(
            turn_id=turn_id,
            conversation_id=address.conversation_id,
            reply_message_id=None,
            item=item("x", state),
        )
        ewmas.append(verdict.ewma)
    assert ewmas[1] == pytest.approx(0.3 * 0.3 + 0.7 * 0.4)
    if reseed:
        # The rebase's reply starts the chain again; the next one folds in as usual.
        assert ewmas[2] == pytest.approx(0.85)
        assert ewmas[3] == pytest.approx(0.3 * 0.8 + 0.7 * 0.85)
    else:
        assert ewmas[2] == pytest.approx(0.3 * 0.85 + 0.7 * ewmas[1])
        assert ewmas[2] < 0.7  # still in drift: the rebase's effect waits for the EWMA


@pytest.mark.parametrize(
    ("hold", "previous", "expected"),
    [
        (False, ActionKind.ANCHOR, ActionKind.REINFORCE),
        (True, ActionKind.ANCHOR, ActionKind.ANCHOR),
        (True, ActionKind.REBASE, ActionKind.ANCHOR),
        # After a reinforcement, or no action on the turn before: the mild answer.
        (True, ActionKind.REINFORCE, ActionKind.REINFORCE),
        (True, None, ActionKind.REINFORCE),
    ],
)
def test_anchors_are_held_through_mild_until_ok(
    hold: bool, previous: ActionKind | None, expected: ActionKind
) -> None:
    settings = PlannerSettings(anchor_min_messages=6, hold_anchors_until_ok=hold)
    decision = plan(
        settings,
        turn_number=10,
        drift=mild(Trend.RECOVERING),
        history_messages=20,
        turns_since_rebase=None,
        previous_action=previous,
    )
    assert decision.kind is expected
