"""One person across channels: one-time link codes, config links, merging people.

A webchat page asks for a code (``LinkCodes.issue``); ``/link <code>`` on
Telegram redeems it (``LinkCodes.redeem``). Redeeming merges the redeeming
identity's person into the code's person: every row that names a person
(identities, conversations, messages, and the memory layer's rows) moves to
the surviving person, so what was said on one channel is remembered on the
other. Conversations stay per identity, so per channel.

Codes are 8 characters from an alphabet without look-alikes (about 40 bits),
shown as ``ABCD-EFGH``. Only their SHA-256 is stored; a given code is compared
with every stored one in constant time; a code is single use (the UPDATE that
marks it used is the check) and expires after ``links.code_ttl_s``. An
identity that tries ``links.max_failed_attempts`` wrong codes is refused for
``links.lockout_s``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, inspect, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.config import LinkedIdentity, LinksConfig, parse_link_people
from gateway.errors import InputError
from gateway.store import Store
from gateway.store.models import (
    Base,
    Conversation,
    Identity,
    LinkAttempt,
    LinkCode,
    Person,
    utcnow,
)
from gateway.store.repo import Address

log = logging.getLogger(__name__)

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no I, O, 0, 1
CODE_LENGTH = 8


class LinkError(InputError):
    code = "link_failed"


class LinkCodeInvalid(LinkError):
    """No live code matches: wrong, expired or already used."""

    code = "link_code_invalid"


class LinkLocked(LinkError):
    """Too many wrong codes from this identity; try again later."""

    code = "link_locked"


@dataclass(frozen=True)
class IssuedCode:
    code: str
    expires_at: datetime


@dataclass(frozen=True)
class LinkResult:
    """The person both identities now belong to; ``merged`` False when they already were one."""

    person_id: int
    merged: bool


def normalize_code(text: str) -> str:
    """What the person typed, as issued: case, spaces and dashes do not matter."""
    return "".join(ch for ch in text.upper() if ch not in " -\t")


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode("ascii", "replace")).hexdigest()


class LinkCodes:
    def __init__(
        self,
        store: Store,
        config: LinksConfig,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.ttl = timedelta(seconds=config.code_ttl_s)
        self.max_failed = config.max_failed_attempts
        self.lockout = timedelta(seconds=config.lockout_s)
        self._clock = clock

    async def issue(self, person_id: int) -> IssuedCode:
        """A new code for this person; their earlier codes stop working."""
        raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        now = self._clock()
        expires_at = now + self.ttl
        async with self.store.session() as session:
            # One live code per person, and expired codes are not kept around.
            await session.execute(
                delete(LinkCode).where(
                    (LinkCode.person_id == person_id) | (LinkCode.expires_at < now - self.ttl)
                )
            )
            session.add(
                LinkCode(
                    person_id=person_id,
                    code_sha256=_digest(raw),
                    created_at=now,
                    expires_at=expires_at,
                )
            )
        return IssuedCode(f"{raw[:4]}-{raw[4:]}", expires_at)

    async def redeem(self, code: str, redeemer: Address) -> LinkResult:
        """Join ``redeemer``'s person to the code's person; raises a ``LinkError``."""
        now = self._clock()
        given = _digest(normalize_code(code))
        async with self.store.session() as session:
            attempt = await session.get(LinkAttempt, redeemer.identity_id)
            if attempt is not None and now - attempt.window_started_at >= self.lockout:
                attempt.failures = 0
                attempt.window_started_at = now
            if attempt is not None and attempt.failures >= self.max_failed:
                raise LinkLocked("too many wrong codes; wait a while and ask for a new one")
            rows = (
                await session.execute(
                    select(
                        LinkCode.id,
                        LinkCode.code_sha256,
                        LinkCode.person_id,
                        LinkCode.expires_at,
                        LinkCode.used_at,
                    )
                )
            ).all()
            match = None
            for row in rows:
                # Every stored code is compared, in constant time, whatever matched before.
                if hmac.compare_digest(row.code_sha256, given):
                    match = row
            problem = ""
            result: LinkResult | None = None
            if match is None:
                problem = "that code is not valid"
            elif match.used_at is not None:
                problem = "that code was already used"
            elif match.expires_at <= now:
                problem = "that code has expired"
            else:
                claimed = await session.execute(
                    update(LinkCode)
                    .where(LinkCode.id == match.id, LinkCode.used_at.is_(None))
                    .values(used_at=now, used_by_identity_id=redeemer.identity_id)
                )
                if getattr(claimed, "rowcount", 0):
                    if attempt is not None:
                        await session.delete(attempt)
                    merged = await merge_people(session, redeemer.person_id, match.person_id)
                    result = LinkResult(match.person_id, merged)
                else:
                    problem = "that code was already used"
            if result is None:
                if attempt is None:
                    session.add(
                        LinkAttempt(
                            identity_id=redeemer.identity_id, failures=1, window_started_at=now
                        )
                    )
                else:
                    attempt.failures += 1
        # Outside the transaction, so the counted failure is committed, not rolled back.
        if result is None:
            raise LinkCodeInvalid(f"{problem}; ask the web page for a new one")
        log.info(
            "identity %d linked to person %d (merged: %s)",
            redeemer.identity_id,
            result.person_id,
            result.merged,
        )
        return result


def _person_columns() -> list[tuple[str, str]]:
    """Every (table, column) that refers to people.id, in any model on our metadata."""
    found = []
    for table in Base.metadata.sorted_tables:
        for column in table.columns:
            if any(fk.column.table.name == Person.__tablename__ for fk in column.foreign_keys):
                found.append((table.name, column.name))
    return found


async def merge_people(session: AsyncSession, source_id: int, target_id: int) -> bool:
    """Move everything of person ``source_id`` to ``target_id`` and delete the source.

    Tables are found by their foreign key to ``people.id``, so tables added by
    later layers (memory, persona) move with the person as long as they
    declare that key. Returns False when they are already the same person.
    """
    if source_id == target_id:
        return False
    existing = await session.run_sync(
        lambda sync: set(inspect(sync.connection()).get_table_names())
    )
    for table_name, column_name in _person_columns():
        if table_name not in existing:
            # A model whose migration is missing: nothing of it can be stored either.
            log.warning("merging people: table %s has no migration; skipped", table_name)
            continue
        table = Base.metadata.tables[table_name]
        column = table.c[column_name]
        await session.execute(
            update(table).where(column == source_id).values({column_name: target_id})
        )
    source = await session.get(Person, source_id)
    target = await session.get(Person, target_id)
    if source is not None and target is not None and not target.display_name:
        target.display_name = source.display_name
    await session.execute(delete(Person).where(Person.id == source_id))
    return True


async def apply_config_links(store: Store, entries: tuple[str, ...]) -> int:
    """Make each ``links.people`` group one person; returns how many people were merged away.

    Identities not seen yet are created for the group's person, so the first
    message from them already lands there.
    """
    merged = 0
    for group in parse_link_people(entries):
        async with store.session() as session:
            merged += await _link_group(session, group)
    if merged:
        log.info("links.people: merged %d people", merged)
    return merged


async def _link_group(session: AsyncSession, group: tuple[LinkedIdentity, ...]) -> int:
    found: dict[LinkedIdentity, int] = {}
    for channel, external_id in group:
        person_id = await session.scalar(
            select(Identity.person_id).where(
                Identity.channel == channel, Identity.external_id == external_id
            )
        )
        if person_id is not None:
            found[(channel, external_id)] = person_id
    if found:
        target_id = min(found.values())
    else:
        person = Person(display_name="")
        session.add(person)
        await session.flush()
        target_id = person.id
    for channel, external_id in group:
        if (channel, external_id) in found:
            continue
        identity = Identity(person_id=target_id, channel=channel, external_id=external_id)
        session.add(identity)
        await session.flush()
        session.add(Conversation(person_id=target_id, identity_id=identity.id, channel=channel))
    merged = 0
    for source_id in sorted(set(found.values()) - {target_id}):
        merged += await merge_people(session, source_id, target_id)
    return merged
