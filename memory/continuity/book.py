"""Working memory and the decision log in the store, for every writer (chat, panel, CLI).

Rules kept here for all of them:

- a focus, an update or a decision is one line of 1 to ``max_chars`` characters,
  tags are 1 to 40 word characters (at most 8); anything else, or a person that
  does not exist, is refused with ``InputError`` and nothing is written;
- the focus is the newest ``set`` not followed by a ``clear``; its updates are the
  ``update`` rows after it; it *fades* when neither was written for
  ``focus_fade_days`` — then it leaves the prompt (the panel and CLI say so);
- decisions are appended, never edited; a reversal names the decision it reverses.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, Row, bindparam, func, select
from sqlalchemy.orm import aliased

from gateway.config import ContinuityConfig
from gateway.errors import InputError
from gateway.prompt import StageRead
from gateway.store import Store
from gateway.store.models import Message, Person, utcnow
from gateway.tokens import estimate_tokens
from gateway.untrusted import storable
from memory.continuity.models import Decision, FocusAction, FocusEntry, Origin
from memory.continuity.rules import shared_words

FOCUS_HEADER = "Working memory: the person's current focus"
DECISIONS_HEADER = (
    "Decisions already made with this person (oldest first). Check this log before "
    "asking about something again; a decision stands until a later one reverses it:"
)
MAX_TAGS = 8
# "Just before": the newest decision's message is at most this many messages back in
# the conversation (three exchanges), the one saying "instead" included.
REVERSAL_RECENT_MESSAGES = 6
_TAG = re.compile(r"^[\w-]{1,40}$")


class TextEmbedder(Protocol):
    """Sentence vectors, L2-normalised, one row per text. Blocking: call in a thread."""

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


@dataclass(frozen=True)
class FocusNote:
    entry_id: int
    action: FocusAction
    text: str
    origin: Origin
    source_message_id: int | None
    created_at: datetime


@dataclass(frozen=True)
class FocusState:
    """A person's focus as of ``now``: the ``set`` row and the updates after it."""

    person_id: int
    focus: FocusNote
    updates: tuple[FocusNote, ...]
    touched_at: datetime
    faded: bool
    # Whole days since it was set and since it was last touched (0: today).
    age_days: int
    idle_days: int


@dataclass(frozen=True)
class DecisionInfo:
    decision_id: int
    person_id: int
    text: str
    tags: tuple[str, ...]
    origin: Origin
    source_message_id: int | None
    reverses_id: int | None
    created_at: datetime
    # The later decision that reverses this one (computed; the row is never changed).
    reversed_by: int | None = None


def _days(since: datetime, now: datetime) -> int:
    return max(0, (now - since) // timedelta(days=1))


def _ago(days: int) -> str:
    return "today" if days == 0 else ("1 day ago" if days == 1 else f"{days} days ago")


def _note(row: FocusEntry | Row[Any]) -> FocusNote:
    return FocusNote(
        row.id, row.action, row.text, row.origin, row.source_message_id, row.created_at
    )


def _decision(row: Decision | Row[Any], reversed_by: int | None = None) -> DecisionInfo:
    return DecisionInfo(
        row.id,
        row.person_id,
        row.text,
        tuple(row.tags or ()),
        row.origin,
        row.source_message_id,
        row.reverses_id,
        row.created_at,
        reversed_by,
    )


class ContinuityBook:
    """Every read and write of the focus and the decisions goes through here."""

    def __init__(
        self,
        store: Store,
        config: ContinuityConfig,
        embedder: TextEmbedder | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.embedder = embedder

    # -- input --------------------------------------------------------------------

    def clean(self, text: str, what: str) -> str:
        """One line of 1..max_chars characters, or ``InputError``."""
        if not isinstance(text, str):
            raise InputError(f"the {what} must be text")
        # Checked before any other work: a 10 MB text is refused at once.
        if len(text) > self.config.max_chars * 4:
            raise InputError(
                f"the {what} is {len(text)} characters; at most {self.config.max_chars} characters"
            )
        line = " ".join(storable(text).split())
        if not line:
            raise InputError(f"the {what} is empty")
        if len(line) > self.config.max_chars:
            raise InputError(
                f"the {what} is {len(line)} characters; at most {self.config.max_chars} characters"
            )
        return line

    def clean_tags(self, tags: Sequence[str]) -> list[str]:
        cleaned = list(dict.fromkeys(t.strip().lstrip("#").lower() for t in tags))
        if len(cleaned) > MAX_TAGS:
            raise InputError(f"at most {MAX_TAGS} tags")
        for tag in cleaned:
            if not _TAG.match(tag):
                raise InputError(
                    f"tag {tag[:50]!r}: 1 to 40 letters, digits, '-' or '_' (no spaces)"
                )
        return cleaned

    async def person(self, person_id: int | None) -> int:
        """The person meant: the one given (it must exist), or the only one in the store."""
        async with self.store.reader() as session:
            if person_id is not None:
                if await session.get(Person, person_id) is None:
                    raise InputError(f"person {person_id} does not exist", code="not_found")
                return person_id
            ids = list(await session.scalars(select(Person.id).order_by(Person.id).limit(2)))
            count = await session.scalar(select(func.count()).select_from(Person))
        if len(ids) == 1:
            return ids[0]
        if not ids:
            raise InputError(
                "no person in the store yet; talk to the agent first", code="not_found"
            )
        raise InputError(f"{count} people in the store: say which with --person ID")

    # -- focus --------------------------------------------------------------------

    async def focus(self, person_id: int, now: datetime | None = None) -> FocusState | None:
        """The person's focus (faded or not), or None when there is none or it was cleared."""
        return self.focus_of(person_id, await self.store.read(self.focus_read(person_id).work), now)

    def focus_read(self, person_id: int) -> StageRead[list[Row[Any]]]:
        """What ``focus`` reads (the working-memory stage declares it: gateway/prompt.py)."""
        return StageRead("focus", partial(_focus_rows, person_id))

    def focus_of(
        self, person_id: int, rows: Sequence[Row[Any]], now: datetime | None = None
    ) -> FocusState | None:
        """``focus`` from the rows ``focus_read`` read."""
        now = now or utcnow()
        if not rows:
            return None
        head, updates = rows[0], rows[1:]
        if head.action is FocusAction.CLEAR:
            return None
        touched = max(row.created_at for row in rows)
        idle = now - touched
        return FocusState(
            person_id,
            _note(head),
            tuple(_note(row) for row in updates),
            touched,
            faded=idle >= timedelta(days=self.config.focus_fade_days),
            age_days=_days(head.created_at, now),
            idle_days=_days(touched, now),
        )

    async def history(self, person_id: int, limit: int = 50) -> list[FocusNote]:
        """The person's focus rows, newest first."""
        async with self.store.reader() as session:
            rows = await session.scalars(
                select(FocusEntry)
                .where(FocusEntry.person_id == person_id)
                .order_by(FocusEntry.id.desc())
                .limit(limit)
            )
            return [_note(row) for row in rows]

    async def _write_focus(
        self,
        person_id: int,
        action: FocusAction,
        text: str,
        origin: Origin,
        source_message_id: int | None,
        at: datetime | None,
    ) -> None:
        async with self.store.session() as session:
            session.add(
                FocusEntry(
                    person_id=person_id,
                    action=action,
                    text=text,
                    origin=origin,
                    source_message_id=source_message_id,
                    created_at=at or utcnow(),
                )
            )

    async def set_focus(
        self,
        person_id: int,
        text: str,
        *,
        origin: Origin,
        source_message_id: int | None = None,
        at: datetime | None = None,
    ) -> FocusState:
        line = self.clean(text, "focus")
        person_id = await self.person(person_id)
        await self._write_focus(person_id, FocusAction.SET, line, origin, source_message_id, at)
        state = await self.focus(person_id, at)
        assert state is not None
        return state

    async def update_focus(
        self,
        person_id: int,
        text: str,
        *,
        origin: Origin,
        source_message_id: int | None = None,
        at: datetime | None = None,
    ) -> FocusState:
        """A timestamped note on the current focus; touching it brings a faded one back."""
        line = self.clean(text, "update")
        person_id = await self.person(person_id)
        if await self.focus(person_id, at) is None:
            raise InputError(f"person {person_id} has no focus to update: set one first")
        await self._write_focus(person_id, FocusAction.UPDATE, line, origin, source_message_id, at)
        state = await self.focus(person_id, at)
        assert state is not None
        return state

    async def clear_focus(
        self,
        person_id: int,
        *,
        origin: Origin,
        source_message_id: int | None = None,
        at: datetime | None = None,
    ) -> FocusNote | None:
        """Ends the focus; the one it ended (None when there was none: nothing written)."""
        person_id = await self.person(person_id)
        state = await self.focus(person_id, at)
        if state is None:
            return None
        await self._write_focus(person_id, FocusAction.CLEAR, "", origin, source_message_id, at)
        return state.focus

    def render_focus(self, state: FocusState | None) -> str:
        """The prompt's block: the focus with its age in days (ages, not times: the
        cached prefix changes at most once a day); nothing when faded or cleared."""
        if state is None or state.faded:
            return ""
        head = state.focus
        when = f"set {_ago(state.age_days)}, on {head.created_at.date().isoformat()}"
        if state.updates:
            when += f"; last touched {_ago(state.idle_days)}"
        lines = [f"{FOCUS_HEADER} ({when}):", head.text]
        budget = self.config.focus_budget_tokens - estimate_tokens("\n".join(lines))
        newest = list(reversed(state.updates))[: self.config.focus_updates_in_prompt]
        shown: list[str] = []
        for note in newest:
            line = f"- update {note.created_at.date().isoformat()}: {note.text}"
            cost = estimate_tokens(line)
            if cost > budget:
                break
            budget -= cost
            shown.append(line)
        return "\n".join([*lines, *reversed(shown)])

    # -- decisions ----------------------------------------------------------------

    async def decisions(self, person_id: int, last: int | None = None) -> list[DecisionInfo]:
        """The person's decisions, oldest first (the newest ``last`` of them)."""
        # Every turn's prompt reads these: one hop on a reader thread (issue 28).
        return decisions_of_rows(await self.store.read(self.decisions_read(person_id, last).work))

    def decisions_read(self, person_id: int, last: int | None) -> StageRead[list[Row[Any]]]:
        """What ``decisions`` reads (the decisions stage declares it: gateway/prompt.py)."""
        return StageRead("decisions", partial(_decision_rows, person_id, last))

    async def reversed_one(
        self, person_id: int, text: str, conversation_id: int | None = None
    ) -> int | None:
        """The decision a reversal of ``text`` reverses: the newest earlier one on the
        same subject (shared content words, or embedding similarity), else the person's
        newest decision when it was said just before, in this conversation ("actually,
        SQLite instead" right after "we decided on Postgres" shares no word with it)."""
        earlier = await self.decisions(person_id, last=50)
        open_ = [d for d in reversed(earlier) if d.reversed_by is None]
        if not open_:
            return None
        for past in open_:
            if len(shared_words(text, past.text)) >= self.config.reversal_shared_words:
                return past.decision_id
        if self.embedder is not None:
            embedder = self.embedder
            vectors = await asyncio.to_thread(embedder.embed, [text, *(d.text for d in open_)])
            similarity = vectors[1:] @ vectors[0]
            best = int(np.argmax(similarity))
            if float(similarity[best]) >= self.config.reversal_similarity:
                return open_[best].decision_id
        newest = earlier[-1]
        if (
            conversation_id is not None
            and newest.reversed_by is None
            and newest.source_message_id is not None
        ):
            async with self.store.reader() as session:
                said_in = await session.scalar(
                    select(Message.conversation_id).where(Message.id == newest.source_message_id)
                )
                since = await session.scalar(
                    select(func.count())
                    .select_from(Message)
                    .where(
                        Message.conversation_id == conversation_id,
                        Message.id > newest.source_message_id,
                    )
                )
            if said_in == conversation_id and (since or 0) <= REVERSAL_RECENT_MESSAGES:
                return newest.decision_id
        return None

    async def log_decision(
        self,
        person_id: int | None,
        text: str,
        *,
        tags: Sequence[str] = (),
        origin: Origin,
        reverses_id: int | None = None,
        source_message_id: int | None = None,
        at: datetime | None = None,
    ) -> DecisionInfo:
        line = self.clean(text, "decision")
        cleaned = self.clean_tags(tags)
        person = await self.person(person_id)
        async with self.store.session() as session:
            if reverses_id is not None:
                target = await session.get(Decision, reverses_id)
                if target is None or target.person_id != person:
                    raise InputError(
                        f"decision {reverses_id} of person {person} does not exist",
                        code="not_found",
                    )
            row = Decision(
                person_id=person,
                text=line,
                tags=cleaned,
                origin=origin,
                source_message_id=source_message_id,
                reverses_id=reverses_id,
                created_at=at or utcnow(),
            )
            session.add(row)
            await session.flush()
            return _decision(row)

    async def logged_from(self, message_id: int) -> bool:
        """True when a decision was already taken from this message (a turn run again)."""
        async with self.store.reader() as session:
            found = await session.scalar(
                select(Decision.id).where(Decision.source_message_id == message_id).limit(1)
            )
        return found is not None

    def render_decisions(self, decisions: Sequence[DecisionInfo]) -> str:
        """The newest decisions within the budget, oldest first, with dates (never ages:
        a decision's line never changes, so the cached prefix changes only with a new one)."""
        budget = self.config.decisions_budget_tokens - estimate_tokens(DECISIONS_HEADER)
        shown: list[str] = []
        for d in reversed(decisions):
            line = f"- #{d.decision_id} {d.created_at.date().isoformat()}: {d.text}"
            if d.tags:
                line += f" [{', '.join(d.tags)}]"
            if d.reverses_id is not None:
                line += f" (reverses #{d.reverses_id})"
            if d.reversed_by is not None:
                line += f" (reversed by #{d.reversed_by})"
            cost = estimate_tokens(line)
            if cost > budget:
                break
            budget -= cost
            shown.append(line)
        if not shown:
            return ""
        return "\n".join([DECISIONS_HEADER, *reversed(shown)])


# The person's focus entries from the last set or clear on (none: never set, as
# ``id >= NULL`` holds for no row), in one statement with the person bound at
# execution; its columns, not the mapped class: Core rows (same attribute names)
# cost the reader thread no ORM session (every turn reads it; issue 28).
_FOCUS = (
    select(FocusEntry.__table__)
    .where(
        FocusEntry.person_id == bindparam("person_id"),
        FocusEntry.id
        >= select(func.max(FocusEntry.id))
        .where(
            FocusEntry.person_id == bindparam("person_id"),
            FocusEntry.action.in_((FocusAction.SET, FocusAction.CLEAR)),
        )
        .scalar_subquery(),
    )
    .order_by(FocusEntry.id)
)

_LATER = aliased(Decision)
# The person's decisions, newest first, each with the first later one that reversed
# it (a correlated subquery: one statement, where two were).
_DECISIONS = (
    select(
        Decision.__table__,
        select(func.min(_LATER.id))
        .where(_LATER.person_id == Decision.person_id, _LATER.reverses_id == Decision.id)
        .correlate(Decision)
        .scalar_subquery()
        .label("reversed_by"),
    )
    .where(Decision.person_id == bindparam("person_id"))
    .order_by(Decision.id.desc())
)


def _focus_rows(person_id: int, connection: Connection) -> list[Row[Any]]:
    """The person's entries from the last set or clear on (none: never set)."""
    return list(connection.execute(_FOCUS, {"person_id": person_id}).all())


def decisions_of_rows(rows: Sequence[Row[Any]]) -> list[DecisionInfo]:
    """``ContinuityBook.decisions`` from the rows ``decisions_read`` read."""
    return [_decision(row, row.reversed_by) for row in reversed(rows)]


def _decision_rows(person_id: int, last: int | None, connection: Connection) -> list[Row[Any]]:
    """The person's decisions, newest first (``last`` of them), each with
    ``reversed_by``: the first later decision that reversed it, if any."""
    query = _DECISIONS if last is None else _DECISIONS.limit(last)
    return list(connection.execute(query, {"person_id": person_id}).all())
