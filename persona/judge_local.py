"""The local judge: a SyncScore with no model at all.

Voice from the reply's similarity to the persona's own exemplar replies (and
its distance from off-voice ones), style from measured length and formatting
against the PersonaState, constraints from the hard-rule checks, and
groundedness from overlap with the injected Memory Pack.
"""

from __future__ import annotations

import asyncio
import calendar
import math
import re
import time
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gateway.errors import AgentGWError
from memory.state import embedding_text
from memory.types import ItemType
from persona.features import measure, trait_distance
from persona.judge import (
    JudgeInput,
    Judgement,
    QueuedEmbedder,
    Scores,
    TextEmbedder,
)
from persona.models import VerdictStatus
from persona.rulecheck import check_rules, constraint_score
from persona.state import Exemplars

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

    def __init__(
        self,
        embedder: TextEmbedder | None,
        exemplars: Exemplars,
        queued: QueuedEmbedder | None = None,
        speaker: str = "",
    ) -> None:
        self.embedder = embedder
        self.exemplars = exemplars
        # The reply's vector through the memory's queue when there is one: it then
        # shares a model call with the turn's memory texts and other turns' (a text
        # alone cost ~9 ms of CPU, ~6 ms in a shared batch; issue 28).
        self.queued = queued
        # The agent's name: the reply is embedded as "Ada: reply", the text the memory
        # stores it as (memory.state.embedding_text), so the queue hands back the vector
        # the memory's ingest has just computed instead of running the model again.
        self.speaker = speaker
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
        return _contrast_of(vectors, embedder.embed([reply])[0])

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
                text = embedding_text(ItemType.EPISODE, self.speaker, item.reply)
                if self.queued is not None:
                    contrast = _contrast_of(vectors, (await self.queued.embed([text]))[0])
                else:
                    contrast = await asyncio.to_thread(self._contrast, embedder, vectors, text)
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


def _contrast_of(
    vectors: tuple[NDArray[np.float32], NDArray[np.float32]], vector: NDArray[np.float32]
) -> float:
    """How much nearer the reply is to the in-voice exemplars than to the off-voice ones."""
    pos, neg = vectors
    return _top_mean(pos @ vector) - _top_mean(neg @ vector)


def _top_mean(similarities: NDArray[np.float32], k: int = 3) -> float:
    top = np.sort(similarities)[-k:]
    return float(top.mean())
