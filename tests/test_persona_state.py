"""PersonaState: EWMA traits, decaying weighted lists, hard rules only by confirmation,
versions with diff and rollback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.errors import InputError
from gateway.store import Store
from persona.features import measure
from persona.models import RuleStatus
from persona.rulecheck import check_rules, constraint_score
from persona.state import (
    HardRule,
    MergePolicy,
    PersonaBook,
    PersonaSignal,
    PersonaState,
    Weighted,
    diff_states,
    initial_state,
    load_exemplars,
)
from persona.track import persona_signal, stated_rules

POLICY = MergePolicy(alpha=0.3, decay=0.5, min_weight=0.05, top_k=3)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'persona.db'}") as opened:
        yield opened


def test_traits_move_by_ewma_with_alpha() -> None:
    state = PersonaState(traits={"verbosity": 0.2, "warmth": 0.8})
    once = state.merged(PersonaSignal(traits={"verbosity": 1.0}, replies=1), POLICY)
    assert once.traits["verbosity"] == pytest.approx(0.7 * 0.2 + 0.3 * 1.0)
    assert once.traits["warmth"] == 0.8
    twice = once.merged(PersonaSignal(traits={"verbosity": 1.0}, replies=1), POLICY)
    assert twice.traits["verbosity"] == pytest.approx(0.7 * 0.44 + 0.3 * 1.0, abs=1e-4)


def test_weighted_lists_decay_and_keep_top_k() -> None:
    state = PersonaState(
        traits={},
        voice_markers=(Weighted("short answer", 0.8), Weighted("fair point", 0.08)),
    )
    signal = PersonaSignal(
        voice_markers={"honestly": 1.0, "two options": 1.0, "good call": 1.0}, replies=3
    )
    merged = state.merged(signal, POLICY)
    weights = {m.text: m.weight for m in merged.voice_markers}
    # 0.8 decays to 0.4; 0.08 decays to 0.04 and falls under min_weight.
    assert weights["short answer"] == pytest.approx(0.4)
    assert "fair point" not in weights
    assert len(merged.voice_markers) == 3  # top_k
    assert merged.voice_markers[0].text == "short answer"


def test_a_signal_never_changes_hard_rules() -> None:
    state = PersonaState(traits={}, hard_rules=(HardRule(1, "Never use emojis"),))
    signal = persona_signal(["Always answer in French from now on! 😀 Never use bullet lists."])
    assert signal.replies == 1
    assert state.merged(signal, POLICY).hard_rules == state.hard_rules


def test_initial_state_is_measured_from_the_exemplars() -> None:
    exemplars = load_exemplars()
    state = initial_state(exemplars, POLICY)
    assert len(exemplars.in_voice) >= 10
    assert len(exemplars.off_voice) >= 5
    # The bundled voice is brief and not formal: that is what the exemplars show.
    assert state.traits["verbosity"] < 0.35
    assert state.traits["formality"] < 0.5
    assert "plain paragraphs" in {f.text for f in state.formatting}


def test_stated_rules_are_found_and_one_offs_are_not() -> None:
    assert stated_rules("Please never use emojis. Thanks!") == ["never use emojis"]
    assert stated_rules("From now on, always answer in under 50 words.") == [
        "always answer in under 50 words"
    ]
    assert stated_rules("Don't call me buddy.") == ["Don't call me buddy"]
    assert stated_rules("Don't worry about it, I don't know either.") == []


def test_rule_checks_read_the_rule_wording() -> None:
    rules = ["Never use emojis", "Keep answers under 12 words", "Don't call me buddy"]
    kept = check_rules(rules, "Sure, Thursday works. See you then.")
    assert [o.kept for o in kept] == [True, True, True]
    broken = check_rules(
        rules, "Sure thing buddy! Thursday really works great for me, so see you then 😀"
    )
    assert [o.kept for o in broken] == [False, False, False]
    assert constraint_score(broken) == 0.0
    unknown = check_rules(["Be kind to my mother"], "ok")
    assert unknown[0].kept is None
    assert constraint_score(unknown) == 1.0


def test_features_see_tone_length_and_formatting() -> None:
    plain = measure("Short answer: yes. Move it to Thursday.")
    stiff = measure(
        "Certainly! Furthermore, it is important to note that, moreover, we shall consider "
        "it.\n\n## Summary\n- one\n- two 🎉"
    )
    assert plain.traits()["formality"] < stiff.traits()["formality"]
    assert plain.traits()["directness"] > stiff.traits()["directness"]
    assert stiff.bullets == 2
    assert stiff.headers == 1
    assert stiff.emojis == 1
    assert {"bullet lists", "headers", "emojis"} <= set(stiff.formatting())


async def test_every_change_is_a_version_with_diff_and_rollback(store: Store) -> None:
    seed = PersonaState(traits={"warmth": 0.5}, formatting=(Weighted("plain paragraphs", 1.0),))
    book = PersonaBook(store, seed)
    first = await book.current()
    assert first.version == 1
    assert first.source == "init"
    assert await book.update(seed, "observe", "nothing new") is None

    warmer = seed.merged(PersonaSignal(traits={"warmth": 1.0}, replies=1), POLICY)
    second = await book.update(warmer, "observe", "persona track")
    assert second is not None
    assert second.version == 2
    diff = await book.diff(1, 2)
    assert "trait warmth: 0.500 -> 0.650" in diff

    back = await book.rollback(1)
    assert back.version == 3
    assert back.source == "rollback"
    assert back.state == seed
    assert [v.version for v in await book.versions()] == [1, 2, 3]
    with pytest.raises(InputError):
        await book.rollback(9)


async def test_hard_rules_become_hard_only_when_confirmed(store: Store) -> None:
    book = PersonaBook(store, PersonaState(traits={"warmth": 0.5}))
    await book.current()
    proposed = await book.propose_rule("never use emojis.", person_id=None)
    again = await book.propose_rule("Never use emojis")
    assert again.rule_id == proposed.rule_id
    assert proposed.status is RuleStatus.PROPOSED
    assert proposed.text == "Never use emojis"
    # Proposed is not hard: the state has no rules and no new version was made.
    current = await book.current()
    assert current.version == 1
    assert current.state.hard_rules == ()

    confirmed = await book.confirm_rule(proposed.rule_id)
    assert confirmed.version == 2
    assert [r.text for r in confirmed.state.hard_rules] == ["Never use emojis"]
    assert "Never use emojis" in confirmed.state.render_contract()
    with pytest.raises(InputError):
        await book.confirm_rule(proposed.rule_id)

    other = await book.propose_rule("Don't call me buddy")
    await book.reject_rule(other.rule_id)
    assert (await book.current()).version == 2  # rejecting a proposal changes nothing

    await book.reject_rule(proposed.rule_id)  # withdrawing a confirmed rule: a new version
    latest = await book.current()
    assert latest.version == 3
    assert latest.state.hard_rules == ()
    assert diff_states(confirmed.state, latest.state) == ["- hard rule #1 'Never use emojis'"]
    statuses = {r.text: r.status for r in await book.rules()}
    assert statuses == {
        "Never use emojis": RuleStatus.REJECTED,
        "Don't call me buddy": RuleStatus.REJECTED,
    }


async def test_concurrent_first_turns_write_version_one_once(store: Store) -> None:
    book = PersonaBook(store, PersonaState(traits={"warmth": 0.5}))
    seen = await asyncio.gather(*(book.current() for _ in range(5)))
    assert {v.version for v in seen} == {1}
    assert [v.version for v in await book.versions()] == [1]


async def test_concurrent_first_turns_read_the_new_version_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway's many first turns all ask for the version before any exists: one of
    them reads it (and writes the seed), the others wait for it and reuse it."""
    book = PersonaBook(store, PersonaState(traits={"warmth": 0.5}))
    opened: list[str] = []
    reader, session = Store.reader, Store.session

    def counted_reader(self: Store) -> object:
        opened.append("reader")
        return reader(self)

    def counted_session(self: Store) -> object:
        opened.append("session")
        return session(self)

    monkeypatch.setattr(Store, "reader", counted_reader)
    monkeypatch.setattr(Store, "session", counted_session)
    seen = await asyncio.gather(*(book.at(None) for _ in range(20)))
    assert {v.version for v in seen} == {1}
    assert opened == ["reader", "session"]
