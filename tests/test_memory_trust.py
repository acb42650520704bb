"""Current facts and the trust pass (issue 22): through real turns (scripted brain,
real store and embedder) and on the rules and the pack directly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser
from sqlalchemy import select

from gateway.brains.base import BlockKind, BrainRequest, Purpose
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from memory.embed import SentenceEmbedder
from memory.models import MemoryItem, MemoryTrace
from memory.service import Episode, MemoryService, PackRequest
from memory.slots import Claim, claims
from memory.trust import ttl_days
from memory.validity_llm import LLMSlotJudge
from tests.conftest import RunningGateway, make_config, requires_chromium, screenshot
from tests.test_telegram import webchat_turn

pytestmark = pytest.mark.slow

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder.load()


def trust_config(tmp_path: Path, **memory: object) -> Config:
    # A verbatim history of (almost) nothing: every earlier message reaches the model
    # through the pack, where the trust pass applies.
    # No nightly at start: its extraction catch-up would add observations of these
    # turns at moments a test does not choose (what a pack holds would vary).
    return make_config(
        tmp_path,
        memory={"embedder": "minilm", "history_tokens": 1, **memory},
        upkeep={"schedule": {"nightly": ""}},
    )


@asynccontextmanager
async def gateway(
    config: Config, brain: ScriptedBrain, embedder: SentenceEmbedder
) -> AsyncIterator[RunningGateway]:
    from aiohttp.test_utils import TestServer

    from gateway.app import GATEWAY, create_app

    server = TestServer(create_app(config, brain=brain, embedder=embedder), host="127.0.0.1")
    await server.start_server()
    await server.app[GATEWAY].ready.wait()
    import aiohttp

    session = aiohttp.ClientSession()
    try:
        yield RunningGateway(server, session)
    finally:
        await session.close()
        await server.close()


async def turn(running: RunningGateway, text: str) -> None:
    await webchat_turn(running, "trust-session-1", text)
    # The reply goes out before the after-turn stages (memory ingest) end.
    router = running.gateway.router
    for _ in range(600):
        if router.turns_in_flight == 0:
            break
        await asyncio.sleep(0.05)
    memory = running.gateway.memory
    assert memory is not None
    await memory.traces_saved()


def pack_lines(brain: ScriptedBrain) -> list[str]:
    """The lines of the memory pack of the last reply request."""
    for request in reversed(brain.requests):
        if request.purpose is not Purpose.REPLY:
            continue
        blocks = [b.text for b in request.system if b.kind is BlockKind.MEMORY]
        assert blocks, "the reply request had no memory block"
        return blocks[0].splitlines()
    raise AssertionError("no reply request")


def line_of(lines: list[str], words: str) -> int:
    found = [n for n, line in enumerate(lines) if words in line]
    assert found, f"{words!r} not in the pack:\n" + "\n".join(lines)
    return found[0]


# -- through real turns --------------------------------------------------------------


async def test_a_move_packs_the_new_place_first_and_the_old_one_superseded(
    tmp_path: Path, embedder: SentenceEmbedder
) -> None:
    brain = ScriptedBrain(script=["Lisbon sounds lovely!", "Congratulations on the move!"])
    async with gateway(trust_config(tmp_path), brain, embedder) as running:
        await turn(running, "I live in Lisbon, in a small flat near the river.")
        await turn(running, "Big news: I moved from Lisbon to Porto!")
        await turn(running, "Where do I live?")
    lines = pack_lines(brain)
    text = "\n".join(lines)
    porto = line_of(lines, "moved from Lisbon to Porto")
    lisbon = line_of(lines, "I live in Lisbon")
    assert porto < lisbon
    assert "[superseded " in lines[lisbon]
    assert "[superseded" not in lines[porto]
    # The agent's reply that repeated the old place is outdated with it, if packed.
    if "Lisbon sounds lovely" in text:
        assert "[superseded " in lines[line_of(lines, "Lisbon sounds lovely")]
    # The frame says what the tag means.
    assert "[superseded DATE]: no longer true" in text


async def test_two_conflicting_statements_in_one_day_are_both_flagged(
    tmp_path: Path, embedder: SentenceEmbedder
) -> None:
    brain = ScriptedBrain()
    async with gateway(trust_config(tmp_path), brain, embedder) as running:
        await turn(running, "My dog's name is Rex.")
        await turn(running, "My dog's name is Biscuit.")
        await turn(running, "What is my dog called?")
    lines = pack_lines(brain)
    rex, biscuit = line_of(lines, "name is Rex"), line_of(lines, "name is Biscuit")
    assert "[conflict]" in lines[rex]
    assert "[conflict]" in lines[biscuit]
    # Same confidence: the newer first.
    assert biscuit < rex
    assert "[conflict]: two memories disagree" in "\n".join(lines)


async def test_unrelated_facts_never_end_each_other(
    tmp_path: Path, embedder: SentenceEmbedder
) -> None:
    brain = ScriptedBrain()
    # No conflict window: any two values of one slot, however close in time, would
    # end one another here, so only the slot rules keep these facts apart.
    config = trust_config(tmp_path, conflict_window_h=0.0)
    async with gateway(config, brain, embedder) as running:
        for text in (
            "I live in Lisbon.",
            "I work at Acme Corp as a designer.",
            "My dog's name is Rex.",
            "My favourite film is Alien.",
            "My sister lives in Berlin.",
            "I love the food in Porto.",
            "We visited Madrid last spring.",
            "My cat's name is Tom.",
            "My favourite book is Dune.",
        ):
            await turn(running, text)
        await turn(running, "Where do I live and where do I work?")
        memory = running.gateway.memory
        assert memory is not None
        async with memory.store.reader() as session:
            ended = (
                await session.scalars(
                    select(MemoryItem.content).where(MemoryItem.valid_until.is_not(None))
                )
            ).all()
    assert ended == []
    assert not any("[superseded" in line or "[conflict" in line for line in pack_lines(brain))


# -- the service, dated ----------------------------------------------------------------


@pytest.fixture
async def service(tmp_path: Path, embedder: SentenceEmbedder) -> AsyncIterator[MemoryService]:
    from gateway.store import Store
    from gateway.store.models import Person

    config = trust_config(tmp_path)
    async with Store(config.database_url) as store:
        async with store.session() as session:
            session.add(Person(id=1, display_name="Ada"))
        started = await MemoryService.start(store, config, embedder=embedder)
        try:
            yield started
        finally:
            await started.aclose()


async def say(service: MemoryService, text: str, at: datetime) -> None:
    await service.ingest([Episode(person_id=1, text=text, at=at, role="user", speaker="Ada")])


async def pack(service: MemoryService, text: str, at: datetime) -> list[str]:
    built = await service.build_pack(PackRequest(person_id=1, text=text, at=at))
    return built.text.splitlines()


async def test_a_question_about_the_past_still_finds_the_old_fact(
    service: MemoryService,
) -> None:
    await say(service, "I live in Lisbon.", T0)
    await say(service, "I moved to Porto.", T0 + timedelta(days=200))
    lines = await pack(service, "Where did I live last year?", T0 + timedelta(days=300))
    assert "[superseded 2026-07-24]" in lines[line_of(lines, "I live in Lisbon")]


async def test_stale_and_uncertain_are_tagged(service: MemoryService) -> None:
    await say(service, "I work at Initech.", T0)
    from memory.repo import NewItem

    await service.add_items(
        [
            NewItem(
                person_id=1,
                type=__import__("memory.types", fromlist=["ItemType"]).ItemType.FACT,
                content="Ada: maybe allergic to cats",
                occurred_at=T0,
                confidence=0.2,
                author="observer",
            )
        ]
    )
    lines = await pack(service, "Where do I work? Any allergies?", T0 + timedelta(days=120))
    assert "[stale]" in lines[line_of(lines, "I work at Initech")]
    assert "[uncertain]" in lines[line_of(lines, "allergic to cats")]


def test_one_ttl_table_drives_the_weekly_archive_and_stale() -> None:
    """[upkeep_jobs] ttl_days_* is the one table: the weekly job's archive cutoff and the
    trust pass's [stale] both move with it."""
    from types import SimpleNamespace

    from gateway.config import UpkeepJobsConfig
    from memory.categories import Category
    from memory.jobs.weekly import ttl_days as weekly_ttl
    from memory.trust import item_tags
    from memory.ttl import domain_ttls

    jobs = UpkeepJobsConfig(ttl_days_work=30.0, ttl_days_relationships=400.0, ttl_days_other=50.0)
    ttls = domain_ttls(jobs)
    ctx: Any = SimpleNamespace(service=SimpleNamespace(jobs=jobs))
    assert weekly_ttl(ctx, Category.WORK) == ttl_days("ada:employer", ttls) == 30.0
    assert weekly_ttl(ctx, Category.RELATIONSHIPS) == ttl_days("ada:dog_name", ttls) == 400.0
    assert weekly_ttl(ctx, None) == ttl_days("ada:residence", ttls) == 50.0

    def tags(slot: str, days: int) -> list[str]:
        return item_tags(
            slot=slot,
            confidence=1.0,
            valid_until=None,
            seen_at=T0,
            now=T0 + timedelta(days=days),
            zone=UTC,
            ttls=ttls,
        )

    # 60 days unsaid: past work's 30, within relationships' 400 (one default would
    # tag both or neither).
    assert tags("ada:employer", 60) == ["stale"]
    assert tags("ada:partner", 60) == []
    assert tags("ada:partner", 401) == ["stale"]


# -- the rules ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "I moved from Lisbon to Porto last month.",
            Claim("residence", "porto", "lisbon", needs_place=True),
        ),
        ("I live in Lisbon.", Claim("residence", "lisbon")),
        ("I started at Acme Corp on Monday", Claim("employer", "acme corp")),
        ("my dog's name is Rex", Claim("dog_name", "rex")),
        ("We broke up.", Claim("partner", "", ends=True)),
        ("I no longer work at Google", Claim("employer", "", "google", ends=True)),
        ("I switched from Vim to Emacs", Claim("uses_editor", "emacs", "vim")),
        ("My favorite color is now green", Claim("favourite_color", "green")),
        # A promotion is a change, however soon after the old title (memory/roles.py).
        ("I got promoted to senior engineer", Claim("job_title", "senior engineer", renews=True)),
        # statuses and life events (memory/statuses.py)
        ("I got promoted at work!", Claim("job_title", "", renews=True)),
        ("They finally made me team lead", Claim("job_title", "team lead", renews=True)),
        ("I'm now an engineering manager", Claim("job_title", "engineering manager", renews=True)),
        ("I'm a barista at the Blue Bottle", Claim("employer", "blue bottle")),
        ("Got fired today", Claim("job_title", "", ends=True, until=T0.date())),
        ("I was made redundant", Claim("employer", "", ends=True)),
        ("I'm between jobs right now", Claim("employer", "", ends=True)),
        ("I went freelance", Claim("employer", "self-employed", renews=True)),
        ("I'm a PhD student at Utrecht", Claim("studies", "utrecht")),
        ("I'm single again", Claim("partner", "", ends=True)),
        ("I've gone vegetarian", Claim("uses_diet", "vegetarian", renews=True)),
        ("Biscuit died on Sunday", Claim("", "", old="biscuit", ends=True, gone=True)),
        ("I finally got my own flat in Brixton!", Claim("residence", "brixton")),
        ("I live with my parents in Croydon", Claim("residence", "croydon")),
    ],
)
def test_rules_read_common_phrasings(text: str, expected: Claim) -> None:
    assert expected in claims(text, T0)


@pytest.mark.parametrize(
    "text",
    [
        "Do you live in Lisbon?",
        "If I moved to Berlin I would be sad",
        "I joined a book club",
        "I love Lisbon",
        "My sister lives in Berlin",
        # someone else's event, a wish, a hobby, a second role, another sense
        "My sister got promoted to head of marketing!",
        "I'm hoping to get promoted in the spring.",
        "I might get laid off next month.",
        "I'm a good cook.",
        "I'm a regular at the Crown.",
        "I'm also a yoga instructor at a studio now.",
        "I'm so fired up about it.",
        "My son graduated from primary school today.",
        "My neighbour's old cat died.",
        "I'm a single mum.",
    ],
)
def test_rules_claim_nothing_here(text: str) -> None:
    assert claims(text, T0) == []


# -- the panel ----------------------------------------------------------------------


@requires_chromium
async def test_the_panel_pack_view_shows_the_tags(
    tmp_path: Path, embedder: SentenceEmbedder, browser: Browser
) -> None:
    from playwright.async_api import expect

    brain = ScriptedBrain()
    async with gateway(trust_config(tmp_path), brain, embedder) as running:
        await turn(running, "I live in Lisbon.")
        await turn(running, "I moved from Lisbon to Porto.")
        await turn(running, "Where do I live?")
        memory = running.gateway.memory
        assert memory is not None
        async with memory.store.reader() as session:
            turn_id = (
                await session.scalars(
                    select(MemoryTrace.turn_id).order_by(MemoryTrace.id.desc()).limit(1)
                )
            ).one()
        context = await browser.new_context()
        page = await context.new_page()
        try:
            await page.goto(running.url(f"/panel/memory/turns/{turn_id}"))
            row = page.locator("#trace tbody tr[data-decision=kept]", has_text="I live in Lisbon")
            # Its echo in the agent's reply ("You said: I live in Lisbon.") is tagged too.
            await expect(row).to_have_count(2)
            await expect(row.first.locator('.trust-tag[data-tag="superseded"]')).to_contain_text(
                "[superseded "
            )
            await expect(page.locator("#trust-legend")).to_be_visible()
            await screenshot(page, "panel-memory-pack-trust.png")
        finally:
            await context.close()


async def test_the_observations_block_never_states_a_replaced_fact_as_current(
    tmp_path: Path, embedder: SentenceEmbedder
) -> None:
    brain = ScriptedBrain()
    config = make_config(
        tmp_path,
        memory={"embedder": "minilm", "history_tokens": 1},
        observe={"observer_tokens": 5},
    )
    async with gateway(config, brain, embedder) as running:
        await turn(running, "I live in Lisbon, in a small flat near the river.")
        loop = running.gateway.persona
        assert loop is not None
        assert await loop.idle(30)
        await turn(running, "Big news: I moved from Lisbon to Porto!")
        assert await loop.idle(30)
        await turn(running, "Where do I live?")
    request = next(r for r in reversed(brain.requests) if r.purpose is Purpose.REPLY)
    block = "\n".join(b.text for b in request.system if b.kind is BlockKind.OBSERVATIONS)
    lisbon = [line for line in block.splitlines() if "I live in Lisbon" in line]
    # Retired by the reflector, or tagged: never an untagged current fact.
    assert all("[superseded " in line for line in lisbon), block
    assert "Porto" in block


# -- the utility model as the judge ----------------------------------------------------


def judge_reply(request: BrainRequest) -> str:
    """A fake utility model: Porto replaces every current residence it is shown."""
    import re

    body = request.messages[0].text
    ids = [int(i) for i in re.findall(r"- id (\d+): residence", body)]
    if "Porto" in body.split("NEW STATEMENT:")[1]:
        return json.dumps(
            {"action": "UPDATE", "attribute": "residence", "value": "porto", "replaces": ids}
        )
    return json.dumps({"action": "ADD", "attribute": "residence", "value": "lisbon"})


async def test_with_a_utility_model_the_model_decides(service: MemoryService) -> None:
    brain = ScriptedBrain(script=[judge_reply, judge_reply])
    service.slot_judge = LLMSlotJudge(brain)
    await say(service, "Lisbon has been home for years.", T0)
    # No rule reads this; the model does.
    await say(service, "Porto is where I hang my hat these days.", T0 + timedelta(days=60))
    assert len(brain.requests) == 2
    lines = await pack(service, "Where is home?", T0 + timedelta(days=90))
    assert "[superseded " in lines[line_of(lines, "Lisbon has been home")]
    assert line_of(lines, "Porto is where") < line_of(lines, "Lisbon has been home")


async def test_a_malformed_judge_leaves_the_rules_to_decide(service: MemoryService) -> None:
    brain = ScriptedBrain(script=["not json", "still not json", "nope", "no"])
    service.slot_judge = LLMSlotJudge(brain)
    await say(service, "I live in Lisbon.", T0)
    await say(service, "I moved to Porto.", T0 + timedelta(days=60))
    lines = await pack(service, "Where do I live?", T0 + timedelta(days=90))
    assert "[superseded " in lines[line_of(lines, "I live in Lisbon")]


async def test_without_a_rule_a_close_statement_with_another_name_takes_the_slot(
    service: MemoryService,
) -> None:
    await say(service, "My favourite film is Alien.", T0)
    # No rule reads this phrasing; its vector is close and it names another film.
    await say(service, "My favourite film these days is Arrival.", T0 + timedelta(days=30))
    # Close too, but naming nothing new: it ends nothing.
    await say(
        service, "My favourite film is still a great one to rewatch.", T0 + timedelta(days=40)
    )
    lines = await pack(service, "What's my favourite film?", T0 + timedelta(days=60))
    assert "[superseded " in lines[line_of(lines, "film is Alien")]
    assert "[superseded" not in lines[line_of(lines, "these days is Arrival")]
