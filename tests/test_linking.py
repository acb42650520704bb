"""Link codes and merging people, against a real SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from gateway.config import LinksConfig, parse_link_people
from gateway.errors import ConfigError
from gateway.linking import (
    LinkCodeInvalid,
    LinkCodes,
    LinkLocked,
    apply_config_links,
    normalize_code,
)
from gateway.store import Conversation, Identity, Message, Person, Store
from gateway.store.models import LinkCode
from gateway.store.repo import resolve_address, store_inbound


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'links.db'}") as opened:
        yield opened


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def links(store: Store, clock: Clock) -> LinkCodes:
    return LinkCodes(
        store, LinksConfig(code_ttl_s=600, max_failed_attempts=3, lockout_s=900), clock
    )


async def person_of(store: Store, channel: str, external_id: str) -> int:
    async with store.session() as session:
        person_id = await session.scalar(
            select(Identity.person_id).where(
                Identity.channel == channel, Identity.external_id == external_id
            )
        )
    assert person_id is not None
    return person_id


async def count(store: Store, model: type[object]) -> int:
    async with store.session() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def test_redeem_merges_telegram_person_into_webchat_person(
    store: Store, links: LinkCodes, clock: Clock
) -> None:
    web = await resolve_address(store, "webchat", "browser-session-1", "")
    tg = await resolve_address(store, "telegram", "4242", "Alice Example")
    await store_inbound(store, tg, "my sister is Ana", clock.now, "tg-1")
    assert web.person_id != tg.person_id

    issued = await links.issue(web.person_id)
    assert issued.expires_at == clock.now + timedelta(seconds=600)
    assert len(normalize_code(issued.code)) == 8

    # Typed sloppily: lower case and spaces instead of the dash.
    result = await links.redeem(issued.code.lower().replace("-", " "), tg)
    assert result.person_id == web.person_id
    assert result.merged

    assert await person_of(store, "telegram", "4242") == web.person_id
    assert await person_of(store, "webchat", "browser-session-1") == web.person_id
    async with store.session() as session:
        conversations = (await session.scalars(select(Conversation))).all()
        messages = (await session.scalars(select(Message))).all()
        merged_away = await session.get(Person, tg.person_id)
        survivor = await session.get(Person, web.person_id)
    # Conversations stay per channel; both belong to the one person now.
    assert sorted(c.channel for c in conversations) == ["telegram", "webchat"]
    assert {c.person_id for c in conversations} == {web.person_id}
    assert [m.person_id for m in messages] == [web.person_id]
    assert merged_away is None
    assert survivor is not None
    assert survivor.display_name == "Alice Example"


async def test_code_is_single_use(store: Store, links: LinkCodes) -> None:
    web = await resolve_address(store, "webchat", "browser-session-1", "")
    tg = await resolve_address(store, "telegram", "4242", "")
    other = await resolve_address(store, "telegram", "777", "")
    issued = await links.issue(web.person_id)
    await links.redeem(issued.code, tg)
    with pytest.raises(LinkCodeInvalid, match="already used"):
        await links.redeem(issued.code, other)
    assert await person_of(store, "telegram", "777") == other.person_id


async def test_expired_code_is_refused(store: Store, links: LinkCodes, clock: Clock) -> None:
    web = await resolve_address(store, "webchat", "browser-session-1", "")
    tg = await resolve_address(store, "telegram", "4242", "")
    issued = await links.issue(web.person_id)
    clock.now += timedelta(seconds=601)
    with pytest.raises(LinkCodeInvalid, match="expired") as caught:
        await links.redeem(issued.code, tg)
    assert caught.value.code == "link_code_invalid"
    assert await person_of(store, "telegram", "4242") == tg.person_id


async def test_new_code_replaces_the_old_one(store: Store, links: LinkCodes) -> None:
    web = await resolve_address(store, "webchat", "browser-session-1", "")
    tg = await resolve_address(store, "telegram", "4242", "")
    first = await links.issue(web.person_id)
    second = await links.issue(web.person_id)
    assert await count(store, LinkCode) == 1
    with pytest.raises(LinkCodeInvalid, match="not valid"):
        await links.redeem(first.code, tg)
    assert (await links.redeem(second.code, tg)).merged


async def test_wrong_codes_lock_out_then_the_lock_expires(
    store: Store, links: LinkCodes, clock: Clock
) -> None:
    web = await resolve_address(store, "webchat", "browser-session-1", "")
    tg = await resolve_address(store, "telegram", "4242", "")
    issued = await links.issue(web.person_id)
    for _ in range(3):
        with pytest.raises(LinkCodeInvalid):
            await links.redeem("ZZZZ-ZZZZ", tg)
    # Locked: even the right code is refused now.
    with pytest.raises(LinkLocked):
        await links.redeem(issued.code, tg)
    clock.now += timedelta(seconds=500)
    with pytest.raises(LinkLocked):
        await links.redeem(issued.code, tg)
    # The lockout (900 s) outlasted the code (600 s): a fresh code works.
    clock.now += timedelta(seconds=401)
    assert (await links.redeem((await links.issue(web.person_id)).code, tg)).merged


async def test_redeeming_twice_for_the_same_person_is_not_a_merge(
    store: Store, links: LinkCodes
) -> None:
    web = await resolve_address(store, "webchat", "browser-session-1", "")
    tg = await resolve_address(store, "telegram", "4242", "")
    await links.redeem((await links.issue(web.person_id)).code, tg)
    tg_now = await resolve_address(store, "telegram", "4242", "")
    again = await links.redeem((await links.issue(web.person_id)).code, tg_now)
    assert again.person_id == web.person_id
    assert not again.merged
    assert await count(store, Person) == 1


async def test_config_links_create_and_merge(store: Store) -> None:
    # One identity exists already; the other is created under the same person.
    tg = await resolve_address(store, "telegram", "4242", "")
    merged = await apply_config_links(store, ("telegram:4242 webchat:alice-laptop",))
    assert merged == 0
    assert await person_of(store, "webchat", "alice-laptop") == tg.person_id
    laptop = await resolve_address(store, "webchat", "alice-laptop", "")
    assert laptop.person_id == tg.person_id

    # Both exist as different people: the older person survives.
    phone = await resolve_address(store, "webchat", "alice-phone", "")
    assert phone.person_id != tg.person_id
    merged = await apply_config_links(store, ("webchat:alice-phone telegram:4242",))
    assert merged == 1
    assert await person_of(store, "webchat", "alice-phone") == tg.person_id
    # Applying again (the next start) changes nothing.
    assert await apply_config_links(store, ("webchat:alice-phone telegram:4242",)) == 0
    assert await count(store, Person) == 1


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("telegram:4242", "fewer than two"),
        ("telegram:4242 email:a@b", "is not channel:id"),
        ("telegram:alice webchat:x", "is a number"),
        ("telegram:4242 webchat:", "is not channel:id"),
    ],
)
def test_config_links_are_validated(entry: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_link_people((entry,))


def test_one_identity_in_two_groups_is_refused() -> None:
    with pytest.raises(ConfigError, match="more than once"):
        parse_link_people(("telegram:1 webchat:a", "telegram:1 webchat:b"))
    assert parse_link_people(("telegram:1 webchat:a",)) == ((("telegram", "1"), ("webchat", "a")),)
