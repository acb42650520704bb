"""SyncScore: how far each reply is from the persona, and where the conversation is heading.

A judge scores a reply on five dimensions (0-1 each): voice, relational
alignment, groundedness (faithful to the injected memory pack), style and
constraint adherence (the hard rules). ``SyncScorer`` turns that into a
weighted composite, folds it into the conversation's EWMA (λ), reads the
trend and the drift tier, and stores the verdict with the judge used, its
latency and cost.

Two judges, chosen by ``persona.judge``:

- ``LLMJudge`` (``persona.judge_llm``): the utility model answers JSON. A malformed answer is asked
  again once, then stored as malformed with the raw text (never invented);
  a second sample is taken only when the composite sits near a tier line.
- ``LocalJudge`` (``persona.judge_local``): no model at all. Embedding
  contrast against the persona's in-voice and off-voice exemplar replies,
  trait distance from measurable features, length and formatting against the
  preferences, hard-rule checks, and overlap with the pack for groundedness.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, bindparam, insert, select

from gateway.brains.base import ChatMessage
from gateway.config import PersonaConfig
from gateway.store import Store
from gateway.store.models import Conversation, utcnow
from persona.models import ActionKind, PersonaAction, SyncScoreRow, VerdictStatus
from persona.state import PersonaState

DIMENSIONS = ("voice", "relational", "groundedness", "style", "constraints")


class Tier(enum.StrEnum):
    OK = "ok"
    MILD = "mild"
    MODERATE = "moderate"
    SEVERE = "severe"


class Trend(enum.StrEnum):
    STABLE = "stable"
    DRIFTING = "drifting"
    RECOVERING = "recovering"


class TextEmbedder(Protocol):
    """Sentence vectors, L2-normalised, one row per text. Blocking: call in a thread."""

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


class QueuedEmbedder(Protocol):
    """The same vectors from the loop: requests of concurrent callers share one model
    call (memory's ``EmbedQueue``), which costs less CPU a text than a call alone."""

    async def embed(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


@dataclass(frozen=True)
class Scores:
    voice: float
    relational: float
    groundedness: float
    style: float
    constraints: float

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in DIMENSIONS}

    @classmethod
    def mean(cls, samples: Sequence[Scores]) -> Scores:
        return cls(
            **{name: sum(getattr(s, name) for s in samples) / len(samples) for name in DIMENSIONS}
        )


@dataclass(frozen=True)
class JudgeInput:
    """Everything a judge sees of one turn."""

    reply: str
    user_message: str
    # The memory pack injected into the prompt (its MEMORY block), and the observations.
    pack: str
    observations: str
    # The history the reply was written against, oldest first.
    history: tuple[ChatMessage, ...]
    persona: str
    state: PersonaState


@dataclass(frozen=True)
class Judgement:
    status: VerdictStatus
    judge: str
    scores: Scores | None = None
    samples: int = 1
    latency_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)


class Judge(Protocol):
    @property
    def name(self) -> str: ...

    async def judge(self, item: JudgeInput) -> Judgement: ...


# -- the arithmetic of the SyncScore -----------------------------------------


@dataclass(frozen=True)
class SyncPolicy:
    weights: Mapping[str, float]
    score_lambda: float = 0.3
    tier_ok: float = 0.7
    tier_mild: float = 0.6
    tier_moderate: float = 0.5
    trend_window: int = 3
    trend_epsilon: float = 0.03
    second_sample_margin: float = 0.03
    # λ for a score above the EWMA (the conversation recovering); None: score_lambda.
    # A falling score still moves the EWMA at score_lambda, so false alarms do not rise.
    lambda_recovering: float | None = None
    # The first verdict of a turn written under a new rebase restarts the EWMA from
    # its own score: the replies before the rebase describe a prompt that is gone.
    reseed_after_rebase: bool = False

    @classmethod
    def from_config(cls, config: PersonaConfig) -> SyncPolicy:
        return cls(
            weights={
                "voice": config.weight_voice,
                "relational": config.weight_relational,
                "groundedness": config.weight_groundedness,
                "style": config.weight_style,
                "constraints": config.weight_constraints,
            },
            score_lambda=config.score_lambda,
            tier_ok=config.tier_ok,
            tier_mild=config.tier_mild,
            tier_moderate=config.tier_moderate,
            trend_window=config.trend_window,
            trend_epsilon=config.trend_epsilon,
            second_sample_margin=config.second_sample_margin,
            lambda_recovering=config.score_lambda_recovering or None,
            reseed_after_rebase=config.reseed_after_rebase,
        )

    def composite(self, scores: Scores) -> float:
        total = sum(self.weights.values())
        values = scores.as_dict()
        return sum(self.weights[name] * values[name] for name in DIMENSIONS) / total

    def ewma(self, previous: float | None, score: float) -> float:
        if previous is None:
            return score
        rate = self.score_lambda
        if self.lambda_recovering is not None and score > previous:
            rate = self.lambda_recovering
        return rate * score + (1 - rate) * previous

    def tier(self, ewma: float) -> Tier:
        if ewma >= self.tier_ok:
            return Tier.OK
        if ewma >= self.tier_mild:
            return Tier.MILD
        if ewma >= self.tier_moderate:
            return Tier.MODERATE
        return Tier.SEVERE

    def trend(self, ewmas: Sequence[float]) -> Trend:
        """From the EWMAs oldest first, the newest last."""
        if len(ewmas) < 2:
            return Trend.STABLE
        reference = ewmas[max(0, len(ewmas) - 1 - self.trend_window)]
        delta = ewmas[-1] - reference
        if delta <= -self.trend_epsilon:
            return Trend.DRIFTING
        if delta >= self.trend_epsilon:
            return Trend.RECOVERING
        return Trend.STABLE

    def near_line(self, composite: float) -> bool:
        lines = (self.tier_ok, self.tier_mild, self.tier_moderate)
        return any(abs(composite - line) < self.second_sample_margin for line in lines)


# -- verdicts in the store -----------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    turn_id: int
    status: VerdictStatus
    judge: str
    scores: Scores | None
    composite: float | None
    ewma: float | None
    trend: Trend
    tier: Tier
    latency_ms: float
    cost_usd: float
    samples: int


@dataclass(frozen=True)
class DriftState:
    """The conversation's drift after its latest verdict (ok when it has none)."""

    ewma: float | None
    tier: Tier
    trend: Trend
    verdicts: int


def _verdict(row: SyncScoreRow) -> Verdict:
    return _verdict_of({name: getattr(row, name) for name in _VERDICT_FIELDS})


_VERDICT_FIELDS = (
    "turn_id",
    "status",
    "judge",
    *DIMENSIONS,
    "composite",
    "ewma",
    "trend",
    "tier",
    "latency_ms",
    "cost_usd",
    "samples",
)


def _verdict_of(fields: Mapping[str, Any]) -> Verdict:
    """The verdict of a stored row's values (a dimension not given is None)."""
    scores = None
    voice = fields.get("voice")
    if fields["status"] is VerdictStatus.SCORED and voice is not None:
        scores = Scores(
            voice,
            fields.get("relational") or 0.0,
            fields.get("groundedness") or 0.0,
            fields.get("style") or 0.0,
            fields.get("constraints") or 0.0,
        )
    return Verdict(
        fields["turn_id"],
        fields["status"],
        fields["judge"],
        scores,
        fields["composite"],
        fields["ewma"],
        Trend(fields["trend"]),
        Tier(fields["tier"]),
        fields["latency_ms"],
        fields["cost_usd"],
        fields["samples"],
    )


# A verdict's statements, built once (every reply is judged; issue 28, "CPU per turn").
# The conversation's row locked for the EWMA chain (see ``SyncScorer.score``).
_LOCK_CONVERSATION = (
    select(Conversation.id)
    .where(Conversation.id == bindparam("conversation_id"))
    .with_for_update(key_share=True)
)
_INSERT_VERDICT = insert(SyncScoreRow)
# The planner's rebase for this turn, if it made one.
_REBASE_OF_TURN = select(PersonaAction.id).where(
    PersonaAction.turn_id == bindparam("turn_id"), PersonaAction.kind == ActionKind.REBASE
)


class SyncScorer:
    """Judges a reply and stores the verdict with the conversation's EWMA, trend and tier."""

    def __init__(self, store: Store, judge: Judge, policy: SyncPolicy) -> None:
        self.store = store
        self.judge = judge
        self.policy = policy
        # The conversation's last EWMAs, built once (the window is the policy's), the
        # conversation bound at execution: every turn runs it (issue 28, "CPU per turn").
        self._previous = (
            select(SyncScoreRow.ewma)
            .where(
                SyncScoreRow.conversation_id == bindparam("conversation_id"),
                SyncScoreRow.ewma.is_not(None),
            )
            .order_by(SyncScoreRow.turn_id.desc())
            .limit(policy.trend_window)
        )

    async def score(
        self,
        *,
        turn_id: int,
        conversation_id: int,
        reply_message_id: int | None,
        item: JudgeInput,
    ) -> Verdict:
        judgement = await self.judge.judge(item)
        previous_query = self._previous

        def work(connection: Connection) -> Verdict:
            # Plain Core in the store's writer (one hop, no ORM unit of work): every
            # reply of a conversation is judged, so this runs once a turn.
            # The EWMA is a chain: on PostgreSQL with several gateways (issue 25) the
            # conversation's row is locked for this transaction, so two processes never
            # both read the same last EWMA and fork the chain (SQLite has one writer).
            # NO KEY UPDATE: new messages of the conversation (a key share) still go in.
            connection.execute(_LOCK_CONVERSATION, {"conversation_id": conversation_id})
            previous = connection.scalars(
                previous_query, {"conversation_id": conversation_id}
            ).all()
            history = [float(v) for v in reversed(previous) if v is not None]
            composite = None
            ewma = history[-1] if history else None
            if judgement.scores is not None:
                composite = self.policy.composite(judgement.scores)
                if self.policy.reseed_after_rebase and _rebased(connection, turn_id):
                    ewma = None
                ewma = self.policy.ewma(ewma, composite)
                history.append(ewma)
            tier = Tier.OK if ewma is None else self.policy.tier(ewma)
            trend = self.policy.trend(history)
            fields: dict[str, Any] = dict(
                turn_id=turn_id,
                conversation_id=conversation_id,
                reply_message_id=reply_message_id,
                status=judgement.status,
                judge=judgement.judge,
                composite=composite,
                ewma=ewma,
                trend=trend.value,
                tier=tier.value,
                samples=judgement.samples,
                latency_ms=judgement.latency_ms,
                cost_usd=judgement.cost_usd,
                input_tokens=judgement.input_tokens,
                output_tokens=judgement.output_tokens,
                detail=judgement.detail,
                created_at=utcnow(),
                **(judgement.scores.as_dict() if judgement.scores else {}),
            )
            connection.execute(_INSERT_VERDICT, fields)
            return _verdict_of(fields)

        return await self.store.write(work)


def _rebased(connection: Connection, turn_id: int) -> bool:
    """Whether this turn's prompt was a new rebase (the planner's action for it)."""
    return connection.scalar(_REBASE_OF_TURN, {"turn_id": turn_id}) is not None


async def drift_state(store: Store, conversation_id: int) -> DriftState:
    async with store.reader() as session:
        row = await session.scalar(
            select(SyncScoreRow)
            .where(SyncScoreRow.conversation_id == conversation_id)
            .order_by(SyncScoreRow.turn_id.desc())
            .limit(1)
        )
        count = len(
            (
                await session.scalars(
                    select(SyncScoreRow.id).where(SyncScoreRow.conversation_id == conversation_id)
                )
            ).all()
        )
    if row is None:
        return DriftState(None, Tier.OK, Trend.STABLE, 0)
    return DriftState(row.ewma, Tier(row.tier), Trend(row.trend), count)


async def verdicts(store: Store, conversation_id: int) -> list[Verdict]:
    async with store.reader() as session:
        rows = (
            await session.scalars(
                select(SyncScoreRow)
                .where(SyncScoreRow.conversation_id == conversation_id)
                .order_by(SyncScoreRow.turn_id)
            )
        ).all()
    return [_verdict(row) for row in rows]
