"""SyncScore: how far each reply is from the persona, and where the conversation is heading.

A judge scores a reply on five dimensions (0-1 each): voice, relational
alignment, groundedness (faithful to the injected memory pack), style and
constraint adherence (the hard rules). ``SyncScorer`` turns that into a
weighted composite, folds it into the conversation's EWMA (λ), reads the
trend and the drift tier, and stores the verdict with the judge used, its
latency and cost.

Two judges, chosen by ``persona.judge``:

- ``LLMJudge``: the utility model answers JSON. A malformed answer is asked
  again once, then stored as malformed with the raw text (never invented);
  a second sample is taken only when the composite sits near a tier line.
- ``LocalJudge``: no model at all. Embedding contrast against the persona's
  in-voice and off-voice exemplar replies, trait distance from measurable
  features, length and formatting against the preferences, hard-rule checks,
  and overlap with the pack for groundedness.
"""

from __future__ import annotations

import asyncio
import calendar
import enum
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import select

from gateway.brains.base import BlockKind, Brain, BrainRequest, ChatMessage, Purpose, SystemBlock
from gateway.config import PersonaConfig
from gateway.errors import AgentGWError, BrainError
from gateway.store import Store
from gateway.store.models import utcnow
from persona.features import measure, trait_distance
from persona.models import SyncScoreRow, VerdictStatus
from persona.rulecheck import check_rules, constraint_score
from persona.state import Exemplars, PersonaState

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
        )

    def composite(self, scores: Scores) -> float:
        total = sum(self.weights.values())
        values = scores.as_dict()
        return sum(self.weights[name] * values[name] for name in DIMENSIONS) / total

    def ewma(self, previous: float | None, score: float) -> float:
        if previous is None:
            return score
        return self.score_lambda * score + (1 - self.score_lambda) * previous

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


# -- the local judge -----------------------------------------------------------

_NUMBER = re.compile(r"\b\d{2,}(?:[:.,/-]\d+)*\b|\b\d+[:./-]\d+\b")
_NAME = re.compile(r"[A-Z][a-z]{2,}")
# Capitalised words that are not names of people, places or things the person told us.
_NOT_NAMES = frozenset(
    (*calendar.day_name, *calendar.month_name[1:], "I'm", "I've", "I'll", "I'd", "OK", "Okay")
)
_MEMORY_CLAIM = re.compile(
    r"\b(you (?:told|said|mentioned|wrote)|you've (?:told|said|mentioned)|i remember|"
    r"last time|earlier you|as you said|you were (?:planning|going)|from what you said)\b",
    re.IGNORECASE,
)
_CONTENT_WORD = re.compile(r"[a-z0-9]{4,}")


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def _clamp(x: float) -> float:
    return max(0.0, min(1.0, x))


def _content_words(text: str) -> set[str]:
    return set(_CONTENT_WORD.findall(text.lower()))


def _specifics(reply: str) -> set[str]:
    """Numbers, and capitalised words that do not open a sentence or a line: names, places."""
    found = {m.group(0) for m in _NUMBER.finditer(reply)}
    for sentence in re.split(r"(?<=[.!?:])\s+|\n+", reply):
        words = re.findall(r"[\w'\u2019]+", sentence)
        for word in words[1:]:
            if _NAME.fullmatch(word) and word not in _NOT_NAMES:
                found.add(word)
    return found


def groundedness(item: JudgeInput) -> tuple[float, dict[str, Any]]:
    """Share of the reply's specifics and memory claims that the context supports."""
    context = "\n".join(
        [item.pack, item.observations, item.user_message, item.persona]
        + [m.text for m in item.history]
    )
    context_lower = context.lower()
    context_words = _content_words(context)
    specifics = _specifics(item.reply)
    unsupported = sorted(s for s in specifics if s.lower() not in context_lower)
    claims = [s for s in re.split(r"(?<=[.!?])\s+", item.reply) if _MEMORY_CLAIM.search(s)]
    ungrounded_claims = []
    for claim in claims:
        wanted = _content_words(_MEMORY_CLAIM.sub(" ", claim))
        if wanted and len(wanted & context_words) / len(wanted) < 0.5:
            ungrounded_claims.append(claim)
    penalty = 0.0
    if specifics:
        # One unsupported name among few costs a quarter; a reply full of them, a half.
        penalty += 0.5 * min(1.0, len(unsupported) / max(2, len(specifics)))
    if claims:
        penalty += 0.5 * len(ungrounded_claims) / len(claims)
    return _clamp(1 - penalty), {
        "unsupported_specifics": unsupported[:10],
        "ungrounded_claims": ungrounded_claims[:5],
    }


def target_words(verbosity: float) -> float:
    """Words a reply of this verbosity has (inverse of the verbosity feature)."""
    return -150 * math.log(1 - min(0.95, max(0.02, verbosity)))


def score_locally(item: JudgeInput, contrast: float | None) -> tuple[Scores, dict[str, Any]]:
    """The five dimensions from features; ``contrast`` is in-voice minus off-voice similarity."""
    features = measure(item.reply)
    traits = features.traits()
    target = item.state.traits
    trait_match = _clamp(
        1 - 2 * trait_distance(traits, target, ("directness", "formality", "humor"))
    )
    embed_voice = 0.5 if contrast is None else _sigmoid(contrast * 12)
    voice = _clamp(0.5 * embed_voice + 0.5 * trait_match - 0.15 * min(1, features.flattery))

    warmth_gap = abs(traits["warmth"] - target.get("warmth", traits["warmth"]))
    relational = _clamp(
        1 - 1.5 * warmth_gap - 0.3 * min(1, features.robotic) - 0.2 * min(1, features.flattery)
    )

    wanted = target_words(target.get("verbosity", 0.3))
    ratio = max(1, features.words) / wanted
    length = math.exp(-0.9 * max(0.0, abs(math.log(ratio)) - 0.5))
    formality = _clamp(1 - 2 * abs(traits["formality"] - target.get("formality", 0.5)))
    preferred = {f.text: f.weight for f in item.state.formatting}
    shown = set(features.formatting()) - {"short replies", "plain paragraphs"}
    unpreferred = sorted(h for h in shown if preferred.get(h, 0.0) < 0.2)
    formatting = _clamp(1 - 0.34 * len(unpreferred))
    style = 0.5 * length + 0.25 * formality + 0.25 * formatting

    grounded, grounded_detail = groundedness(item)
    outcomes = check_rules([r.text for r in item.state.hard_rules], item.reply)
    scores = Scores(voice, relational, grounded, style, constraint_score(outcomes))
    detail: dict[str, Any] = {
        "traits": {k: round(v, 3) for k, v in traits.items()},
        "contrast": None if contrast is None else round(contrast, 4),
        "words": features.words,
        "target_words": round(wanted),
        "unpreferred_formatting": unpreferred,
        "rules": [{"rule": o.rule, "kept": o.kept} for o in outcomes],
        **grounded_detail,
    }
    return scores, detail


class LocalJudge:
    """Scores replies with no model: embeddings of the exemplars and measurable features."""

    def __init__(self, embedder: TextEmbedder | None, exemplars: Exemplars) -> None:
        self.embedder = embedder
        self.exemplars = exemplars
        self._vectors: tuple[NDArray[np.float32], NDArray[np.float32]] | None = None
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return "local"

    def _embed_exemplars(
        self, embedder: TextEmbedder
    ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        pos = embedder.embed(list(self.exemplars.in_voice))
        neg = embedder.embed(list(self.exemplars.off_voice) or ["As an AI language model."])
        return pos, neg

    @staticmethod
    def _contrast(
        embedder: TextEmbedder,
        vectors: tuple[NDArray[np.float32], NDArray[np.float32]],
        reply: str,
    ) -> float:
        pos, neg = vectors
        vector = embedder.embed([reply])[0]
        return _top_mean(pos @ vector) - _top_mean(neg @ vector)

    async def judge(self, item: JudgeInput) -> Judgement:
        start = time.perf_counter()
        contrast: float | None = None
        embedder = self.embedder
        failure = ""
        if embedder is not None:
            try:
                async with self._lock:
                    vectors = self._vectors
                    if vectors is None:
                        vectors = await asyncio.to_thread(self._embed_exemplars, embedder)
                        self._vectors = vectors
                contrast = await asyncio.to_thread(self._contrast, embedder, vectors, item.reply)
            except AgentGWError as exc:  # the embedder maps its failures into our tree
                failure = f"embedding failed ({exc.code}): voice from features only"
        scores, detail = score_locally(item, contrast)
        if contrast is None:
            detail["note"] = failure or "no embedder: voice from features only"
        return Judgement(
            VerdictStatus.SCORED,
            self.name,
            scores,
            latency_ms=(time.perf_counter() - start) * 1000,
            detail=detail,
        )


def _top_mean(similarities: NDArray[np.float32], k: int = 3) -> float:
    top = np.sort(similarities)[-k:]
    return float(top.mean())


# -- the LLM judge -------------------------------------------------------------

JUDGE_INSTRUCTIONS = """You judge whether an assistant's reply stays true to its persona.
Score each dimension from 0.0 (badly off) to 1.0 (exactly right):
- voice: sounds like the persona below (tone, directness, humour, wording);
- relational: treats the person the way the persona relates to people;
- groundedness: every fact about the person or the past is supported by the memory
  pack or the conversation; invented memories score low; no claims scores 1.0;
- style: length, formatting and register match the persona's preferences;
- constraints: keeps every hard rule (1.0 when there are none).
Answer with one JSON object and nothing else:
{"voice": 0.0, "relational": 0.0, "groundedness": 0.0, "style": 0.0, "constraints": 0.0,
 "notes": "one short sentence"}"""

RETRY_PROMPT = (
    "That was not one JSON object with the five numeric scores between 0 and 1. "
    "Answer again with only the JSON object."
)


def parse_judge_answer(text: str) -> tuple[Scores, str] | None:
    """The scores from an answer, or None when it is not the JSON asked for."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    values: dict[str, float] = {}
    for name in DIMENSIONS:
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not 0.0 <= float(value) <= 1.0:
            return None
        values[name] = float(value)
    notes = data.get("notes", "")
    return Scores(**values), notes if isinstance(notes, str) else ""


class LLMJudge:
    """The utility model as judge, answering JSON."""

    def __init__(
        self,
        brain: Brain,
        policy: SyncPolicy,
        *,
        max_tokens: int = 300,
        input_usd_per_mtok: float = 1.0,
        output_usd_per_mtok: float = 5.0,
    ) -> None:
        self.brain = brain
        self.policy = policy
        self.max_tokens = max_tokens
        self.prices = (input_usd_per_mtok, output_usd_per_mtok)
        self.model = ""

    @property
    def name(self) -> str:
        return f"llm:{self.model}" if self.model else f"llm:{self.brain.name}"

    def request(self, item: JudgeInput) -> BrainRequest:
        rules = item.state.render_rules() or "Hard rules: none."
        system = (
            SystemBlock(BlockKind.GUIDANCE, JUDGE_INSTRUCTIONS),
            SystemBlock(
                BlockKind.PERSONA,
                f"THE PERSONA\n{item.persona}\n\n{item.state.render_contract()}\n\n{rules}",
                cache=True,
            ),
        )
        recent = "\n".join(f"{m.role}: {m.text}" for m in item.history[-4:]) or "(none)"
        body = (
            f"MEMORY PACK given to the assistant:\n{item.pack or '(empty)'}\n\n"
            f"OBSERVATIONS given to the assistant:\n{item.observations or '(none)'}\n\n"
            f"RECENT CONVERSATION:\n{recent}\n\n"
            f"THE PERSON'S MESSAGE:\n{item.user_message}\n\n"
            f"THE REPLY TO JUDGE:\n{item.reply}"
        )
        return BrainRequest(
            system=system,
            messages=(ChatMessage("user", body),),
            purpose=Purpose.UTILITY,
            max_tokens=self.max_tokens,
            temperature=0.0,
        )

    async def _sample(self, request: BrainRequest, usage: list[int]) -> tuple[Scores, str] | str:
        """One sample, asked again once when malformed; the raw answers when both fail."""
        answers = []
        for attempt in range(2):
            completion = await self.brain.complete(request)
            self.model = completion.model
            usage[0] += completion.usage.input_tokens
            usage[1] += completion.usage.output_tokens
            parsed = parse_judge_answer(completion.text)
            if parsed is not None:
                return parsed
            answers.append(completion.text)
            usage[2] += 1
            if attempt == 0:
                request = BrainRequest(
                    system=request.system,
                    messages=(
                        *request.messages,
                        ChatMessage("assistant", completion.text or "(empty)"),
                        ChatMessage("user", RETRY_PROMPT),
                    ),
                    purpose=request.purpose,
                    max_tokens=request.max_tokens,
                    temperature=request.temperature,
                )
        return "\n---\n".join(answers)

    async def judge(self, item: JudgeInput) -> Judgement:
        start = time.perf_counter()
        usage = [0, 0, 0]  # input tokens, output tokens, malformed answers
        request = self.request(item)

        def finish(status: VerdictStatus, scores: Scores | None, **detail: Any) -> Judgement:
            cost = (usage[0] * self.prices[0] + usage[1] * self.prices[1]) / 1_000_000
            return Judgement(
                status,
                self.name,
                scores,
                samples=detail.pop("samples", 1),
                detail={**detail, "malformed_answers": usage[2]},
                latency_ms=(time.perf_counter() - start) * 1000,
                input_tokens=usage[0],
                output_tokens=usage[1],
                cost_usd=cost,
            )

        try:
            first = await self._sample(request, usage)
            if isinstance(first, str):
                return finish(VerdictStatus.MALFORMED, None, raw=first[:4000])
            scores, notes = first
            if not self.policy.near_line(self.policy.composite(scores)):
                return finish(VerdictStatus.SCORED, scores, notes=notes)
            second = await self._sample(request, usage)
            if isinstance(second, str):
                # The first sample stands; the second is recorded as what it was.
                return finish(
                    VerdictStatus.SCORED, scores, notes=notes, samples=2, second_raw=second[:2000]
                )
            return finish(
                VerdictStatus.SCORED,
                Scores.mean([scores, second[0]]),
                notes=notes,
                samples=2,
                first=scores.as_dict(),
                second=second[0].as_dict(),
            )
        except BrainError as exc:
            return finish(VerdictStatus.FAILED, None, error=exc.code, message=str(exc)[:500])


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
    scores = None
    if row.status is VerdictStatus.SCORED and row.voice is not None:
        scores = Scores(
            row.voice,
            row.relational or 0.0,
            row.groundedness or 0.0,
            row.style or 0.0,
            row.constraints or 0.0,
        )
    return Verdict(
        row.turn_id,
        row.status,
        row.judge,
        scores,
        row.composite,
        row.ewma,
        Trend(row.trend),
        Tier(row.tier),
        row.latency_ms,
        row.cost_usd,
        row.samples,
    )


class SyncScorer:
    """Judges a reply and stores the verdict with the conversation's EWMA, trend and tier."""

    def __init__(self, store: Store, judge: Judge, policy: SyncPolicy) -> None:
        self.store = store
        self.judge = judge
        self.policy = policy

    async def score(
        self,
        *,
        turn_id: int,
        conversation_id: int,
        reply_message_id: int | None,
        item: JudgeInput,
    ) -> Verdict:
        judgement = await self.judge.judge(item)
        async with self.store.session() as session:
            previous = (
                await session.scalars(
                    select(SyncScoreRow.ewma)
                    .where(
                        SyncScoreRow.conversation_id == conversation_id,
                        SyncScoreRow.ewma.is_not(None),
                    )
                    .order_by(SyncScoreRow.turn_id.desc())
                    .limit(self.policy.trend_window)
                )
            ).all()
            history = [float(v) for v in reversed(previous) if v is not None]
            composite = None
            ewma = history[-1] if history else None
            if judgement.scores is not None:
                composite = self.policy.composite(judgement.scores)
                ewma = self.policy.ewma(ewma, composite)
                history.append(ewma)
            tier = Tier.OK if ewma is None else self.policy.tier(ewma)
            trend = self.policy.trend(history)
            values = judgement.scores.as_dict() if judgement.scores else {}
            row = SyncScoreRow(
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
                **values,
            )
            session.add(row)
            await session.flush()
            return _verdict(row)


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
