"""The persona loop's facts of one turn, read once, in one statement, and shared.

The persona stages of a turn need the current PersonaState, how far the
observer has read the conversation, its standing rebase and its drift. Each
stage used to read its own (seven reads a turn, the current version parsed
twice); ``persona_turn`` reads them together the first time a stage asks and
keeps them in the turn's draft for the others. A version's state is parsed
once per version, not once per turn (``PersonaBook.at``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, bindparam, func, select
from sqlalchemy.sql.elements import ColumnElement

from gateway.prompt import PromptDraft, StageRead, TurnContext
from persona.judge import DriftState, Tier, Trend
from persona.models import ActionKind, ObserveCursor, PersonaAction, PersonaVersion, SyncScoreRow
from persona.state import PersonaBook, VersionInfo


@dataclass(frozen=True)
class PersonaTurn:
    version: VersionInfo
    # Every message up to this id has been read by the observer.
    observed_through: int
    # The detail of the conversation's latest rebase (its summary and base message), if any.
    standing: dict[str, Any] | None
    drift: DriftState
    # The kind and turn number of the conversation's latest action, if any.
    latest_action: tuple[ActionKind, int] | None = None


# The conversation's id, bound at execution: the statement is built once, at import
# (building it cost the event loop ~1 ms a turn; issue 28, "CPU per turn").
_CONVERSATION = bindparam("conversation_id", type_=Integer)


def _latest_score(column: Any) -> ColumnElement[Any]:
    return (
        select(column)
        .where(SyncScoreRow.conversation_id == _CONVERSATION)
        .order_by(SyncScoreRow.turn_id.desc())
        .limit(1)
        .scalar_subquery()
    )


def _latest_action(column: Any) -> ColumnElement[Any]:
    return (
        select(column)
        .where(PersonaAction.conversation_id == _CONVERSATION)
        .order_by(PersonaAction.id.desc())
        .limit(1)
        .scalar_subquery()
    )


_TURN_FACTS = select(
    select(func.max(PersonaVersion.version)).scalar_subquery(),
    select(ObserveCursor.observed_through_message_id)
    .where(ObserveCursor.conversation_id == _CONVERSATION)
    .scalar_subquery(),
    select(PersonaAction.detail)
    .where(
        PersonaAction.conversation_id == _CONVERSATION,
        PersonaAction.kind == ActionKind.REBASE,
    )
    .order_by(PersonaAction.id.desc())
    .limit(1)
    .scalar_subquery(),
    _latest_score(SyncScoreRow.id),
    _latest_score(SyncScoreRow.ewma),
    _latest_score(SyncScoreRow.tier),
    _latest_score(SyncScoreRow.trend),
    select(func.count())
    .select_from(SyncScoreRow)
    .where(SyncScoreRow.conversation_id == _CONVERSATION)
    .scalar_subquery(),
    _latest_action(PersonaAction.kind),
    _latest_action(PersonaAction.detail),
)


def facts_read(conversation_id: int) -> StageRead[tuple[Any, ...]]:
    """The facts' one statement (the persona state stage declares it: gateway/prompt.py)."""
    params = {"conversation_id": conversation_id}
    return StageRead(
        "persona_turn", lambda connection: tuple(connection.execute(_TURN_FACTS, params).one())
    )


async def read_persona_turn(book: PersonaBook, conversation_id: int) -> PersonaTurn:
    """The facts in one statement (plus one when a new persona version came up)."""
    # A plain read on a reader thread: one hop, where a session pays several a statement.
    return await persona_turn_of(book, await book.store.read(facts_read(conversation_id).work))


async def persona_turn_of(book: PersonaBook, row: tuple[Any, ...]) -> PersonaTurn:
    """The facts from their statement's row (and the version it names, read if new)."""
    version, through, standing, score_id, ewma, tier, trend, verdicts, kind, detail = row
    latest = None
    if kind is not None and detail and "turn_number" in detail:
        latest = (ActionKind(kind), int(detail["turn_number"]))
    drift = (
        DriftState(None, Tier.OK, Trend.STABLE, 0)
        if score_id is None
        else DriftState(ewma, Tier(tier), Trend(trend), int(verdicts))
    )
    return PersonaTurn(
        version=await book.at(version),
        observed_through=int(through or 0),
        standing=dict(standing) if standing is not None else None,
        drift=drift,
        latest_action=latest,
    )


async def persona_turn(book: PersonaBook, turn: TurnContext, draft: PromptDraft) -> PersonaTurn:
    """The turn's persona facts: read by the first persona stage that asks, then shared."""
    facts = draft.fact(PersonaTurn)
    if facts is None:
        row = await draft.read(facts_read(turn.conversation_id), book.store)
        facts = await persona_turn_of(book, row)
        draft.facts[PersonaTurn] = facts
    return facts
