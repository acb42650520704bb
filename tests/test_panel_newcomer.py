"""The panel as a newcomer reads it (issue 27, item 6): people are named, never by
a session id; an empty pack trace says why; the observations page says when the
observer runs and can run it now; drift says why it is empty offline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from gateway.brains.offline import OfflineBrain
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.store.models import Turn
from gateway.store.repo import resolve_address
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.panel_support import chat
from web.panel.people import given_name, person_names


@pytest.fixture
def config(tmp_path: Path) -> Config:
    # No nightly at start: its extraction catch-up would read, beside the turn, the
    # backlog that "observe now" is tested on (and read it half: before the reply).
    return make_config(tmp_path, upkeep={"schedule": {"nightly": ""}})


async def page(running: RunningGateway, path: str) -> str:
    async with running.session.get(running.url(path)) as response:
        assert response.status == 200, await response.text()
        return await response.text()


async def post(running: RunningGateway, path: str, body: Any, **headers: str) -> tuple[int, Any]:
    async with running.session.post(running.url(path), json=body, headers=headers) as response:
        if response.content_type != "application/json":
            return response.status, await response.text()
        return response.status, await response.json()


def test_a_given_name_is_read_from_what_the_person_said() -> None:
    assert given_name("Hi! My name is Ines, nice to meet you") == "Ines"
    assert given_name("you can call me Bo.") == "Bo"
    assert given_name("call me later please") == ""
    assert given_name("what is my name?") == ""


async def test_people_are_named_never_by_session_id(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    first, second, ines = (
        "0123456789abcdef0123456789abcdef",
        "fedcba9876543210fedcba9876543210",
        "aaaabbbbccccddddaaaabbbbccccdddd",
    )
    brain.script = ["Hello.", "Hi.", "Nice to meet you, Ines."]
    await chat(running, ["Hello there"], session=first)
    await chat(running, ["Good morning"], session=second)
    await chat(running, ["Hi! My name is Ines."], session=ines)
    store = running.gateway.store
    sam = await resolve_address(store, "telegram", "4242", display_name="Sam Jones")
    web_ids = [
        (await running.gateway.router.address("webchat", s)).person_id
        for s in (first, second, ines)
    ]
    async with store.reader() as session:
        names = await person_names(session, [*web_ids, sam.person_id, 999])
    assert [names[i] for i in web_ids] == ["Web visitor 1", "Web visitor 2", "Ines"]
    assert names[sam.person_id] == "Sam Jones"
    assert names[999] == "Person 999"

    for path in ("/panel", "/panel/conversations", "/panel/conversations/2", "/panel/memory"):
        html = await page(running, path)
        for session_id in (first, second, ines):
            assert session_id not in html, path
        assert "Web visitor 2" in html, path
    turns = await (await running.session.get(running.url("/api/turns"))).json()
    assert {t["who"] for t in turns["turns"]} == {"Web visitor 1", "Web visitor 2", "Ines"}


async def test_an_empty_pack_trace_says_why(running: RunningGateway, brain: ScriptedBrain) -> None:
    brain.script = ["Lovely.", "Sure."]
    await chat(running, ["I grow tomatoes on my balcony.", "How are my tomatoes doing?"])
    async with running.gateway.store.reader() as session:
        first, second = (await session.scalars(select(Turn.id).order_by(Turn.id))).all()
    html = await page(running, f"/panel/memory/turns/{first}")
    assert 'id="why-empty"' in html
    assert "Nothing stored for this person matched the message" in html
    # The tomatoes are found, but they are this conversation's recent history.
    html = await page(running, f"/panel/memory/turns/{second}")
    assert "all from the message's own conversation, which is in the recent history" in html
    assert "Web visitor 1" in html


async def test_observe_now_runs_the_observer_and_says_what_it_found(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    brain.script = ["Tea it is."]
    await chat(running, ["I prefer green tea to coffee."])
    html = await page(running, "/panel/observations")
    assert "When the observer runs" in html
    assert "1200 tokens" in html  # observe.observer_tokens: not reached by one message
    match = re.search(r'<tr data-conversation="(\d+)">', html)
    assert match is not None, "the unread conversation is not listed"
    conversation_id = int(match[1])
    assert "Observe now" in html

    refused, _ = await post(
        running,
        "/api/observations/observe",
        {"conversation_id": conversation_id},
        Origin="https://evil.example",
    )
    assert refused == 403
    status, answer = await post(running, "/api/observations/observe", {"conversation_id": "x"})
    assert status == 400, answer
    status, answer = await post(running, "/api/observations/observe", {"conversation_id": 999})
    assert status == 404, answer

    own = running.url("/panel/observations")
    status, answer = await post(
        running,
        "/api/observations/observe",
        {"conversation_id": conversation_id},
        Origin=own.rsplit("/panel", 1)[0],
    )
    assert status == 200, answer
    assert answer["ran"] is True
    assert answer["observed_messages"] == 2
    assert answer["observations"] >= 1
    assert answer["summary"].startswith("Observed 2 messages of Web visitor 1 (rules)")
    html = await page(running, "/panel/observations")
    assert 'id="all-read"' in html
    assert "green tea" in html

    status, answer = await post(
        running, "/api/observations/observe", {"conversation_id": conversation_id}
    )
    assert status == 200
    assert answer["ran"] is False
    assert "has read every message" in answer["summary"]


async def test_drift_says_why_it_is_empty_offline(tmp_path: Path) -> None:
    server, session = await start_gateway(make_config(tmp_path), OfflineBrain())
    running = RunningGateway(server, session)
    try:
        await chat(running, ["Hello?"])
        html = await page(running, "/panel/drift")
        assert 'id="why-empty"' in html
        assert "notices are never judged" in html
    finally:
        await session.close()
        await server.close()
