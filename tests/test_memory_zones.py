"""The people's time zone (``agent.timezone``): "yesterday" is their yesterday.

A message sent at 6 pm in Los Angeles is stored at 1 am UTC the next day. Its
"today", the pack's "yesterday" and the date on its line must be the person's
days, not UTC's.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from gateway.brains.base import BlockKind
from gateway.brains.scripted import ScriptedBrain
from gateway.clock import day_start, host_zone, zone_label, zone_named
from gateway.config import Config
from gateway.context import ClockStage
from gateway.errors import ConfigError
from gateway.prompt import PromptDraft, TurnContext
from gateway.store import Store
from gateway.store.models import Person
from gateway.store.repo import resolve_address
from gateway.zones import PersonZones
from memory import repo
from memory.models import MemoryItem
from memory.service import Episode, MemoryService, PackRequest
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.panel_support import chat

LOS_ANGELES = "America/Los_Angeles"
# Friday 3 May 2024, 6 pm in Los Angeles: already Saturday in UTC.
HIKE_AT = datetime(2024, 5, 4, 1, 0, tzinfo=UTC)
SAID = [
    (datetime(2024, 5, 3, 10, 0, tzinfo=UTC), "I had pasta with Ana for lunch."),
    (HIKE_AT, "I went hiking near Malibu today, my legs hurt."),
    (datetime(2024, 5, 4, 20, 0, tzinfo=UTC), "I watched a film at home."),
]
# Saturday 4 May, 9 am in Los Angeles.
ASKED = datetime(2024, 5, 4, 16, 0, tzinfo=UTC)


async def said_then_asked(tmp_path: Path, timezone: str) -> tuple[list[int], list[str], str]:
    """The episodes' ids and the days they refer to, and the pack for "yesterday"."""
    config = make_config(tmp_path, agent={"timezone": timezone})
    async with Store(config.database_url) as store:
        service = await MemoryService.start(store, config)
        sam = await resolve_address(store, "webchat", "session-sam", display_name="Sam")
        ids = await service.ingest(
            [Episode(sam.person_id, text, at, "user", "Sam") for at, text in SAID]
        )
        refers = [str(i.refers_start) for i in await repo.get_items(store, ids)]
        pack = await service.build_pack(
            PackRequest(sam.person_id, "What did I do yesterday?", ASKED)
        )
        assert pack.window is not None
        in_window = [c["id"] for c in pack.result.trace if "time" in c["sources"]]
        await service.aclose()
    return in_window, refers, f"{pack.window.start}\n{pack.text}"


async def test_yesterday_and_today_are_the_persons_days(tmp_path: Path) -> None:
    for folder in ("la", "utc"):
        (tmp_path / folder).mkdir()
    in_window, refers, pack = await said_then_asked(tmp_path / "la", LOS_ANGELES)
    # Yesterday, in Los Angeles, was Friday: the lunch and the hike (sent Saturday UTC).
    assert pack.startswith("2024-05-03\n")
    assert sorted(in_window) == [1, 2]
    # The hike's "today" is the Friday it was said on, and its line shows that day.
    assert refers[1] == "2024-05-03"
    assert "- 2024-05-03 #m2 Sam: I went hiking near Malibu" in pack

    in_window, refers, pack = await said_then_asked(tmp_path / "utc", "UTC")
    # Read in UTC, the hike happened on Saturday and is not yesterday's.
    assert pack.startswith("2024-05-03\n")
    assert in_window == [1]
    assert refers[1] == "2024-05-04"
    assert "hiking" not in pack


async def test_the_prompt_clock_is_the_persons_clock() -> None:
    stage = ClockStage(PersonZones(None, ZoneInfo(LOS_ANGELES)))
    draft = PromptDraft()
    turn = TurnContext(
        turn_id=1,
        conversation_id=1,
        person_id=1,
        channel="webchat",
        message_id=1,
        text="hi",
        received_at=HIKE_AT,
    )
    await stage.apply(turn, draft)
    (guidance,) = draft.blocks[BlockKind.GUIDANCE]
    assert "Friday 03 May 2024, 18:00 (America/Los_Angeles, UTC-07:00)" in guidance


def test_a_zone_is_named_or_the_machines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"agent\.timezone"):
        make_config(tmp_path, agent={"timezone": "Mars/Olympus_Mons"})
    assert zone_named("utc") is UTC
    assert zone_label(ZoneInfo("Europe/Lisbon"), datetime(2024, 7, 1, tzinfo=UTC)) == (
        "Europe/Lisbon, UTC+01:00"
    )
    # Midnight in Lisbon's summer is 11 pm UTC the day before.
    assert day_start(date(2024, 7, 1), ZoneInfo("Europe/Lisbon")) == datetime(
        2024, 6, 30, 23, 0, tzinfo=UTC
    )

    monkeypatch.delenv("TZ", raising=False)
    etc = tmp_path / "etc"
    etc.mkdir()
    assert host_zone(etc) is UTC  # nothing says: UTC
    (etc / "localtime").symlink_to("/usr/share/zoneinfo/Europe/Berlin")
    assert host_zone(etc) == ZoneInfo("Europe/Berlin")
    (etc / "timezone").write_text("Asia/Tokyo\n")
    assert host_zone(etc) == ZoneInfo("Asia/Tokyo")
    monkeypatch.setenv("TZ", ":America/Sao_Paulo")
    assert host_zone(etc) == ZoneInfo("America/Sao_Paulo")


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path, agent={"timezone": "Asia/Tokyo"})


async def test_the_panel_and_the_prompt_show_the_persons_time(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    await chat(running, ["Good morning! I moved to Osaka last week."])
    (clock,) = [b.text for b in brain.requests[-1].system if "message arrived on" in b.text]
    async with running.session.get(running.url("/api/turns")) as response:
        (turn,) = (await response.json())["turns"]
    received = datetime.fromisoformat(turn["received_at"]).astimezone(ZoneInfo("Asia/Tokyo"))
    assert f"{received:%H:%M} (Asia/Tokyo, UTC+09:00)" in clock
    async with running.session.get(running.url("/panel/conversations")) as response:
        page = await response.text()
    assert "Asia/Tokyo" in page
    assert f"{received:%Y-%m-%d %H:%M}" in page
    assert turn["received_at"][:16].replace("T", " ") not in page  # not UTC's time


async def test_a_webchat_page_reports_its_zone_for_its_person(tmp_path: Path) -> None:
    # The gateway runs in UTC (a server); the person's browser is in Los Angeles.
    config = make_config(tmp_path, memory={"embedder": "none"})
    brain = ScriptedBrain()
    server, session = await start_gateway(config, brain)
    running = RunningGateway(server, session)
    try:
        ws = await session.ws_connect(running.url("/ws?session=zone-page-1&tz=Mars%2FBase"))
        await ws.close()
        store = running.gateway.store
        async with store.reader() as reader:
            person = await reader.scalar(select(Person))
        assert person is not None
        assert person.timezone == ""  # not a zone: ignored, and the page still connects

        url = running.url(f"/ws?session=zone-page-1&tz={quote(LOS_ANGELES, safe='')}")
        ws = await session.ws_connect(url)
        await ws.close()
        async with store.reader() as reader:
            assert await reader.scalar(select(Person.timezone)) == LOS_ANGELES
        await chat(running, ["I went hiking near Malibu today."], session="zone-page-1")
        clock = [b.text for b in brain.requests[-1].system if "message arrived on" in b.text]
        assert "(America/Los_Angeles, UTC-0" in clock[0]
        # The day the hike is remembered for is the person's.
        async with store.reader() as reader:
            hike = await reader.scalar(
                select(MemoryItem).where(MemoryItem.content.contains("hiking"))
            )
        assert hike is not None
        assert hike.refers_start == hike.occurred_at.astimezone(ZoneInfo(LOS_ANGELES)).date()
        # The panel's pages about this person show their times in their zone.
        said = hike.occurred_at.astimezone(ZoneInfo(LOS_ANGELES))
        for path in (
            f"/panel/conversations/{hike.conversation_id}",
            f"/panel/memory/items/{hike.id}",
        ):
            async with session.get(running.url(path)) as response:
                page = await response.text()
            assert response.status == 200, path
            assert f">{LOS_ANGELES}</span>" in page, path
            assert f"{said:%Y-%m-%d %H:%M}" in page, path
        async with session.get(running.url("/panel/memory")) as response:
            assert ">UTC</span>" in await response.text()  # a page of everyone's: the gateway's
    finally:
        await session.close()
        await server.close()
