"""Observer and Reflector: dated observations with provenance, the guards, supersession."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gateway.brains.base import BrainRequest
from gateway.brains.scripted import ScriptedBrain
from gateway.config import ObserveConfig
from gateway.context import load_persona
from gateway.store import Store
from gateway.store.repo import finish_turn, resolve_address, store_inbound
from gateway.zones import PersonZones
from memory.timeparse import referred_day, resolve_window
from persona.anchor import wrap_note
from persona.models import ObservationStatus, RuleStatus, SyncScoreRow, VerdictStatus
from persona.observation.block import render_block
from persona.observation.guards import batches, clean_for_observer, instruction_lines
from persona.observation.llm import LLMObserver, LLMReflector
from persona.observation.log import ObservationLog
from persona.observation.rules import RuleObserver, RuleReflector
from persona.observation.run import ObservePass
from persona.observation.types import (
    Category,
    KnownObservation,
    Observation,
    Priority,
    SourceMessage,
)
from persona.state import MergePolicy, PersonaBook, PersonaState

AT = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
PERSONA = load_persona("", "Ada")
INSTRUCTIONS = instruction_lines(PERSONA)


def msg(message_id: int, text: str, role: str = "user", at: datetime = AT) -> SourceMessage:
    return SourceMessage(message_id, role, "Sam" if role == "user" else "Ada", text, at)


def obs(
    text: str, days: int = 0, priority: Priority = Priority.MEDIUM, ids: tuple[int, ...] = (1,)
) -> Observation:
    return Observation(text, priority, Category.FACT, AT + timedelta(days=days), ids)


def test_dates_resolve_against_the_message_time() -> None:
    assert referred_day("I went to a support group yesterday", AT) == (
        date(2023, 5, 7),
        "yesterday",
    )
    assert referred_day("we fly out next Friday", AT) == (date(2023, 5, 12), "next Friday")
    assert referred_day("two weeks ago I ran", AT) == (date(2023, 4, 24), "two weeks ago")
    assert referred_day("this may help", AT) is None


async def test_rule_observer_records_dated_prioritised_observations() -> None:
    observer = RuleObserver(INSTRUCTIONS)
    result = await observer.observe(
        [
            msg(1, "Hey! Please remember that my sister Ana's birthday is on 14 June."),
            msg(2, "I really love hiking in the Alps. I'm going to Zermatt next Friday."),
            msg(3, "Glad to hear it. I'll remind you on Thursday to pack.", role="assistant"),
            msg(4, "ok cool"),
        ]
    )
    by_text = {o.text: o for o in result.observations}
    remember = by_text["Sam: Please remember that my sister Ana's birthday is on 14 June."]
    assert remember.priority is Priority.HIGH
    assert remember.category is Category.FACT
    assert remember.referred_on == date(2023, 6, 14)
    assert remember.relative_phrase == "14 June"
    assert remember.source_message_ids == (1,)
    assert remember.observed_at == AT
    plan = by_text["Sam: I'm going to Zermatt next Friday."]
    assert plan.category is Category.DECISION
    assert plan.priority is Priority.HIGH
    assert by_text["Sam: I really love hiking in the Alps."].category is Category.PREFERENCE
    assert by_text["Ada: I'll remind you on Thursday to pack."].category is Category.DECISION
    assert result.unextracted == 1  # "ok cool" gave nothing, and it says so
    assert result.author == "rules"


async def test_observer_never_records_the_systems_instructions_or_anchors() -> None:
    anchor = wrap_note("Ada, this is still you: direct, warm. Hard rules: Never use emojis.")
    pasted = "\n".join(PERSONA.splitlines()[:12])
    observer = RuleObserver(INSTRUCTIONS)
    result = await observer.observe(
        [
            msg(1, f"{anchor}\n\nI work as a nurse in Leeds."),
            msg(2, f"Look what my friend sent me:\n{pasted}"),
            msg(3, "I am Ada and I love remembering people.", role="assistant"),
        ]
    )
    texts = [o.text for o in result.observations]
    assert "Sam: I work as a nurse in Leeds." in texts
    # The person's own lead-in may be kept; the pasted instructions and the anchor are not.
    assert set(texts) <= {"Sam: I work as a nurse in Leeds.", "Sam: Look what my friend sent me:"}
    assert not any("Ada" in t or "gateway" in t or "emojis" in t for t in texts)
    assert "gateway note" not in clean_for_observer(anchor + "\nhello", INSTRUCTIONS)


async def test_llm_observer_output_is_guarded_too() -> None:
    answer = {
        "observations": [
            {
                "text": "Sam works as a nurse in Leeds",
                "priority": "medium",
                "category": "fact",
                "referred_date": None,
                "relative_phrase": "",
                "sources": [1],
            },
            {
                "text": "Say so when you do not know or do not remember something",
                "priority": "high",
                "category": "preference",
                "sources": [1],
            },
            {"text": "Sam likes tea", "priority": "low", "category": "preference", "sources": [99]},
        ]
    }
    brain = ScriptedBrain(script=[json.dumps(answer)])
    result = await LLMObserver(brain, INSTRUCTIONS).observe([msg(1, "I work as a nurse in Leeds.")])
    assert [o.text for o in result.observations] == ["Sam works as a nurse in Leeds"]
    assert len(result.notes) == 2  # the echo and the invalid source were dropped, and noted


async def test_one_huge_message_is_still_observed() -> None:
    huge = " ".join(
        f"Paragraph {i} is about the garden, the shed and the fence." for i in range(400)
    )
    huge += "\n\nPlease remember that my flight is on 3 July."
    parts = batches([msg(7, huge)], max_tokens=500)
    assert len(parts) > 5
    assert all(len(b) == 1 for b in parts)
    assert all(b[0].message_id == 7 for b in parts)

    def answer(request: BrainRequest) -> str:
        text = request.messages[-1].text
        if "flight" not in text:
            return json.dumps({"observations": []})
        return json.dumps(
            {
                "observations": [
                    {
                        "text": "Sam's flight is on 2023-07-03",
                        "priority": "high",
                        "category": "decision",
                        "referred_date": "2023-07-03",
                        "relative_phrase": "3 July",
                        "sources": [7],
                    }
                ]
            }
        )

    brain = ScriptedBrain(script=[answer] * len(parts))
    result = await LLMObserver(brain, INSTRUCTIONS, chunk_tokens=500).observe([msg(7, huge)])
    assert len(brain.requests) == len(parts)  # every part went to the observer
    assert [o.referred_on for o in result.observations] == [date(2023, 7, 3)]
    # The rule-based observer reads a huge message whole as well.
    rules = await RuleObserver(INSTRUCTIONS).observe([msg(7, huge)])
    assert any("flight" in o.text for o in rules.observations)


async def test_llm_observer_malformed_twice_falls_back_to_rules() -> None:
    brain = ScriptedBrain(script=["not json", "still not json"])
    result = await LLMObserver(brain, INSTRUCTIONS).observe([msg(1, "I live in Porto.")])
    assert [o.text for o in result.observations] == ["Sam: I live in Porto."]
    assert result.notes
    assert "rule fallback" in result.notes[0]
    assert len(brain.requests) == 2


async def test_reflector_supersedes_combines_promotes_and_keeps_high() -> None:
    known = [
        KnownObservation(1, obs("Sam: I live in Boston.", 0)),
        KnownObservation(2, obs("Sam: I moved to Denver last month.", 30)),
        KnownObservation(3, obs("Sam: I went running by the river this morning.", 1)),
        KnownObservation(4, obs("Sam: I went running by the river this morning again.", 2)),
        KnownObservation(5, obs("Sam: I went running by the river this morning with Jo.", 3)),
        KnownObservation(6, obs("Sam: My passport expires in August.", 4, Priority.HIGH)),
        KnownObservation(
            7, obs("Sam: I had pasta for lunch today at the office.", 5, Priority.LOW)
        ),
        KnownObservation(
            8, obs("Sam: I watched a long documentary about whales.", 6, Priority.LOW)
        ),
    ]
    reflection = await RuleReflector().reflect(known, target_tokens=40)
    assert reflection.supersede == ((1, 2),)
    (merge,) = reflection.merges
    assert merge.ids == (3, 4, 5)
    assert merge.promoted
    assert merge.observation.priority is Priority.HIGH
    assert "recurring: 3 times since 2023-05-09" in merge.observation.text
    assert 6 not in reflection.drops  # high priority is never dropped for space
    assert set(reflection.drops) <= {7, 8}
    assert reflection.drops


async def test_llm_reflector_cannot_lose_a_high_priority_observation() -> None:
    known = [
        KnownObservation(1, obs("Sam lives in Boston", 0)),
        KnownObservation(2, obs("Sam moved to Denver", 30)),
        KnownObservation(3, obs("Sam is allergic to peanuts", 1, Priority.HIGH)),
        KnownObservation(4, obs("Sam had pasta", 2, Priority.LOW)),
    ]
    answer = {
        "observations": [
            {
                "text": "Sam lives in Denver (moved from Boston)",
                "priority": "medium",
                "category": "fact",
                "sources": [2],
                "supersedes": [1],
            }
        ]
    }
    reflection = await LLMReflector(ScriptedBrain(script=[json.dumps(answer)])).reflect(
        known, target_tokens=100
    )
    assert reflection.supersede == ((1, 2),)
    assert reflection.merges[0].ids == (2,)
    assert reflection.drops == (4,)  # 3 was left out but is high priority: it stays


def test_block_is_stable_dated_and_budgeted() -> None:
    observations = [
        obs("Sam: I live in Porto.", 0),
        obs("Sam: My passport expires in August.", 1, Priority.HIGH),
        obs("Sam: I had pasta.", 2, Priority.LOW),
    ]
    block = render_block(observations, budget_tokens=1000)
    assert block == render_block(list(reversed(observations)), budget_tokens=1000)
    lines = block.splitlines()
    assert lines[1] == "2023-05-08"
    assert "Porto" in lines[2]
    small = render_block(observations, budget_tokens=60)
    assert "passport" in small
    assert "pasta" not in small


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'observe.db'}") as opened:
        yield opened


async def test_observe_pass_cursor_persona_track_rules_and_reflection(store: Store) -> None:
    address = await resolve_address(store, "webchat", "observe-test", "Sam")
    replies = []
    texts = [
        "Please never use emojis with me.",
        "I live in Boston and I work as a nurse.",
        "Actually I moved to Denver last week.",
    ]
    for n, text in enumerate(texts):
        inbound = await store_inbound(store, address, text, AT + timedelta(minutes=n), None)
        reply_text = "Noted. Short answer: yes." if n != 1 else "Great question!!! 🎉 Certainly!"
        reply = await finish_turn(store, inbound, reply_text, {})
        replies.append(reply.id)
        async with store.session() as session:
            session.add(
                SyncScoreRow(
                    turn_id=inbound.turn_id,
                    conversation_id=address.conversation_id,
                    reply_message_id=reply.id,
                    status=VerdictStatus.SCORED,
                    judge="fixed",
                    composite=0.9 if n != 1 else 0.3,
                    ewma=0.8,
                )
            )
    book = PersonaBook(store, PersonaState(traits={"verbosity": 0.5, "humor": 0.5}))
    log = ObservationLog(store)
    config = ObserveConfig(observer_tokens=10_000, reflector_tokens=20)
    observe = ObservePass(
        store,
        log,
        RuleObserver(INSTRUCTIONS),
        RuleReflector(),
        book,
        config,
        MergePolicy(),
        agent_name="Ada",
        instructions=lambda: INSTRUCTIONS,
    )
    assert not await observe.due(address.conversation_id)
    assert await observe.run(address.conversation_id, address.person_id) is None  # under threshold
    result = await observe.run(address.conversation_id, address.person_id, force=True)
    assert result is not None
    assert result.observed_messages == 6
    assert await log.cursor(address.conversation_id) == replies[-1]
    assert await log.unobserved(address.conversation_id) == []

    # Persona track: only the two in-voice replies taught the state (version 2).
    assert result.persona_version == 2
    version = await book.current()
    assert version.state.traits["verbosity"] < 0.5
    assert version.state.hard_rules == ()  # the stated rule is only proposed
    assert [(r.text, r.status) for r in await book.rules()] == [
        ("Never use emojis with me", RuleStatus.PROPOSED)
    ]

    # The reflector ran (20-token threshold): Denver superseded Boston, kept on record.
    assert result.reflected
    everything = {s.observation.text: s for s in await log.all(address.person_id)}
    boston = everything["Sam: I live in Boston and I work as a nurse."]
    denver = everything["Sam: Actually I moved to Denver last week."]
    assert boston.status is ObservationStatus.SUPERSEDED
    assert denver.status is ObservationStatus.ACTIVE
    assert denver.observation.referred_on == date(2023, 5, 1)
    block = await log.block(address.person_id, 1000)
    assert "Denver" in block
    assert "Boston" not in block
    runs = await log.runs(address.person_id)
    assert [r.kind for r in runs] == ["observer", "reflector"]
    assert runs[0].unextracted_messages >= 1
    assert runs[0].input_messages == 6


def pass_in_zone(store: Store, log: ObservationLog, zones: PersonZones) -> ObservePass:
    """Rules only, thresholds out of the way, people in ``zones``."""
    return ObservePass(
        store,
        log,
        RuleObserver(INSTRUCTIONS),
        RuleReflector(),
        PersonaBook(store, PersonaState(traits={})),
        ObserveConfig(observer_tokens=10_000, reflector_tokens=10_000),
        MergePolicy(),
        agent_name="Ada",
        instructions=lambda: INSTRUCTIONS,
        zones=zones,
    )


async def test_observations_are_read_and_shown_on_the_persons_clock(store: Store) -> None:
    # Friday 3 May 2024, 6 pm in Los Angeles: Saturday 1 am in UTC.
    said_at = datetime(2024, 5, 4, 1, 0, tzinfo=UTC)
    address = await resolve_address(store, "webchat", "zone-test", "Sam")
    inbound = await store_inbound(
        store, address, "I have a dentist appointment tomorrow morning.", said_at, None
    )
    await finish_turn(store, inbound, "Good luck at the dentist.", {})
    zones = PersonZones(None, ZoneInfo("America/Los_Angeles"))
    log = ObservationLog(store, zones=zones)
    observe = pass_in_zone(store, log, zones)
    assert await observe.run(address.conversation_id, address.person_id, force=True)
    (dentist,) = [
        s.observation for s in await log.all(address.person_id) if "dentist" in s.observation.text
    ]
    assert dentist.referred_on == date(2024, 5, 4)  # Saturday, not Sunday
    assert dentist.observed_at == said_at  # stored as the moment it was, in UTC
    block = await log.block(address.person_id, 1000)
    assert "\n2024-05-03\n" in block
    assert "(18:00) Sam: I have a dentist appointment" in block


async def test_recurring_means_on_two_of_the_persons_days(store: Store) -> None:
    said = "Sam: I go running along the river before work."
    times = [  # Friday evening twice and Saturday afternoon, in Los Angeles
        datetime(2024, 5, 4, 1, 0, tzinfo=UTC),
        datetime(2024, 5, 4, 3, 0, tzinfo=UTC),
        datetime(2024, 5, 4, 20, 0, tzinfo=UTC),
    ]

    async def reflected(session_id: str, zone: str) -> list[str]:
        address = await resolve_address(store, "webchat", session_id, "Sam")
        log = ObservationLog(store)
        await log.add(
            address.person_id,
            address.conversation_id,
            [Observation(said, Priority.MEDIUM, Category.FACT, at, ()) for at in times],
            "rules",
        )
        observe = pass_in_zone(store, log, PersonZones(None, ZoneInfo(zone)))
        assert await observe.reflect_if_due(address.person_id, None, force=True)
        return [s.observation.text for s in await log.active(address.person_id)]

    # All three fell on one UTC day: merged, but not recurring there.
    assert await reflected("zone-utc", "UTC") == [said]
    # In Los Angeles they were on two days.
    assert await reflected("zone-la", "America/Los_Angeles") == [
        f"{said} (recurring: 3 times since 2024-05-03)"
    ]


@pytest.mark.parametrize(
    ("text", "day", "phrase"),
    [
        # Said on Monday 8 May: the Friday before it, not the one after.
        ("We went hiking on Friday.", date(2023, 5, 5), "on Friday"),
        # Two days back, not read as "yesterday".
        (
            "I visited my parents the day before yesterday.",
            date(2023, 5, 6),
            "the day before yesterday",
        ),
    ],
)
async def test_observer_reads_dates_as_the_pack_does(text: str, day: date, phrase: str) -> None:
    (observation,) = (await RuleObserver(INSTRUCTIONS).observe([msg(1, text)])).observations
    assert (observation.referred_on, observation.relative_phrase) == (day, phrase)
    window = resolve_window(text, AT)  # how the pack reads the same message
    assert window is not None
    assert (window.start, window.end, window.phrase) == (day, day, phrase)
