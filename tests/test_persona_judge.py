"""SyncScore: composite, EWMA, tiers and trend; the LLM judge's retry and second sample;
the local judge from features and embeddings; verdicts stored with the EWMA chain."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from gateway.brains.base import ChatMessage, Purpose
from gateway.brains.scripted import ScriptedBrain
from gateway.errors import BrainUnavailable
from gateway.store import Store
from gateway.store.repo import resolve_address, store_inbound
from persona.judge import (
    JudgeInput,
    Judgement,
    Scores,
    SyncPolicy,
    SyncScorer,
    Tier,
    Trend,
    drift_state,
)
from persona.judge_llm import (
    LLMJudge,
    parse_judge_answer,
)
from persona.judge_local import LocalJudge
from persona.models import VerdictStatus
from persona.state import HardRule, MergePolicy, PersonaState, initial_state, load_exemplars

WEIGHTS = {"voice": 0.3, "relational": 0.15, "groundedness": 0.2, "style": 0.15, "constraints": 0.2}
POLICY = SyncPolicy(weights=WEIGHTS)


class HashEmbedder:
    """A deterministic bag-of-words embedder: shared words make vectors close."""

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.calls += 1
        out = np.zeros((len(texts), 256), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z']+|[^\sa-z]", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % 256] += 1.0
            norm = float(np.linalg.norm(out[row])) or 1.0
            out[row] /= norm
        return out


def item(reply: str, state: PersonaState, *, pack: str = "", user: str = "hi") -> JudgeInput:
    return JudgeInput(
        reply=reply,
        user_message=user,
        pack=pack,
        observations="",
        history=(ChatMessage("user", "earlier"), ChatMessage("assistant", "ok")),
        persona="You are Ada. Direct and warm.",
        state=state,
    )


def state_with_rules(*rules: str) -> PersonaState:
    base = initial_state(load_exemplars(), MergePolicy())
    return PersonaState(
        traits=base.traits,
        formatting=base.formatting,
        stance=base.stance,
        hard_rules=tuple(HardRule(i, r) for i, r in enumerate(rules, 1)),
    )


def judge_json(**scores: float) -> str:
    values = dict.fromkeys(WEIGHTS, 0.9) | scores
    return json.dumps({**values, "notes": "fine"})


def test_composite_weights_and_ewma_with_lambda() -> None:
    scores = Scores(voice=1.0, relational=0.0, groundedness=1.0, style=0.0, constraints=1.0)
    assert POLICY.composite(scores) == pytest.approx(0.3 + 0.2 + 0.2)
    ewma = POLICY.ewma(None, 0.9)
    assert ewma == 0.9  # the first verdict seeds the EWMA
    ewma = POLICY.ewma(ewma, 0.4)
    assert ewma == pytest.approx(0.3 * 0.4 + 0.7 * 0.9)


@pytest.mark.parametrize(
    ("ewma", "tier"),
    [
        (0.95, Tier.OK),
        (0.7, Tier.OK),
        (0.6999, Tier.MILD),
        (0.6, Tier.MILD),
        (0.5999, Tier.MODERATE),
        (0.5, Tier.MODERATE),
        (0.4999, Tier.SEVERE),
        (0.0, Tier.SEVERE),
    ],
)
def test_tiers_at_their_lines(ewma: float, tier: Tier) -> None:
    assert POLICY.tier(ewma) is tier


def test_trend_compares_with_the_window_before() -> None:
    assert POLICY.trend([0.8]) is Trend.STABLE
    assert POLICY.trend([0.8, 0.79, 0.79, 0.78]) is Trend.STABLE
    assert POLICY.trend([0.8, 0.75, 0.7, 0.65]) is Trend.DRIFTING
    assert POLICY.trend([0.5, 0.55, 0.6, 0.65]) is Trend.RECOVERING


def test_parse_judge_answer_refuses_anything_but_the_five_scores() -> None:
    parsed = parse_judge_answer("Here you go:\n" + judge_json(voice=0.4))
    assert parsed is not None
    assert parsed[0].voice == 0.4
    assert parse_judge_answer("voice 0.9, style 0.8") is None
    assert parse_judge_answer(json.dumps({"voice": 0.9})) is None
    assert parse_judge_answer(judge_json(voice=7.0)) is None
    assert parse_judge_answer(judge_json(voice=True)) is None  # type: ignore[arg-type]


async def test_llm_judge_retries_malformed_once_then_records_it() -> None:
    brain = ScriptedBrain(script=["I think it is fine.", "Still not JSON, sorry."])
    judge = LLMJudge(brain, POLICY)
    verdict = await judge.judge(item("Short answer: yes.", state_with_rules()))
    assert verdict.status is VerdictStatus.MALFORMED
    assert verdict.scores is None  # nothing invented
    assert "Still not JSON" in verdict.detail["raw"]
    assert len(brain.requests) == 2
    assert brain.requests[0].purpose is Purpose.UTILITY
    assert "not one JSON object" in brain.requests[1].messages[-1].text


async def test_llm_judge_recovers_on_the_retry() -> None:
    brain = ScriptedBrain(script=["{broken", judge_json(voice=0.95)])
    verdict = await LLMJudge(brain, POLICY).judge(item("Yes.", state_with_rules()))
    assert verdict.status is VerdictStatus.SCORED
    assert verdict.scores is not None
    assert verdict.scores.voice == 0.95
    assert verdict.input_tokens > 0
    assert verdict.cost_usd > 0
    assert verdict.judge == "llm:scripted-1"


async def test_second_sample_only_near_a_tier_line() -> None:
    far = ScriptedBrain(script=[judge_json()])  # composite 0.9: far from every line
    verdict = await LLMJudge(far, POLICY).judge(item("Yes.", state_with_rules()))
    assert verdict.samples == 1
    assert len(far.requests) == 1

    near_line = dict.fromkeys(WEIGHTS, 0.71)  # composite 0.71: within 0.03 of 0.7
    near = ScriptedBrain(script=[json.dumps(near_line), judge_json(voice=0.65)])
    verdict = await LLMJudge(near, POLICY).judge(item("Yes.", state_with_rules()))
    assert verdict.samples == 2
    assert len(near.requests) == 2
    assert verdict.scores is not None
    assert verdict.scores.voice == pytest.approx((0.71 + 0.65) / 2)


async def test_llm_judge_failure_is_recorded_as_failed() -> None:
    brain = ScriptedBrain(script=[BrainUnavailable("down")])
    verdict = await LLMJudge(brain, POLICY).judge(item("Yes.", state_with_rules()))
    assert verdict.status is VerdictStatus.FAILED
    assert verdict.scores is None
    assert verdict.detail["error"] == "brain_unavailable"


async def test_local_judge_prefers_the_persona_voice() -> None:
    embedder = HashEmbedder()
    judge = LocalJudge(embedder, load_exemplars())
    state = state_with_rules("Never use emojis")
    in_voice = await judge.judge(
        item("Short answer: yes. Move it to Thursday and tell Sam.", state)
    )
    off_voice = await judge.judge(
        item(
            "Great question! I'm absolutely thrilled to help with this wonderful request! 🎉 "
            "Furthermore, it is important to note that there are numerous factors to consider, "
            "and moreover each factor shall be examined comprehensively in accordance with best "
            "practices.\n\n## Overview\n- Point one\n- Point two\n- Point three",
            state,
        )
    )
    assert in_voice.scores is not None
    assert off_voice.scores is not None
    assert in_voice.judge == "local"
    assert in_voice.cost_usd == 0.0
    assert in_voice.scores.voice > off_voice.scores.voice
    assert in_voice.scores.style > off_voice.scores.style
    assert in_voice.scores.constraints == 1.0
    assert off_voice.scores.constraints == 0.0  # the emoji broke the hard rule
    assert POLICY.composite(in_voice.scores) >= 0.7 > POLICY.composite(off_voice.scores)
    # Each exemplar list is embedded once (two calls), then one call per reply.
    assert embedder.calls == 4
    await judge.judge(item("Fair point.", state))
    assert embedder.calls == 5


async def test_local_judge_embeds_the_reply_through_the_queue() -> None:
    """With the memory's queue, the reply's vector comes from it (shared with other
    turns' texts), not from a call of its own; the scores are the same."""
    from memory.embed import EmbedQueue

    state = state_with_rules()
    reply = "Short answer: yes. Move it to Thursday and tell Sam."
    alone = await LocalJudge(HashEmbedder(), load_exemplars()).judge(item(reply, state))
    embedder = HashEmbedder()
    queue = EmbedQueue(embedder)  # type: ignore[arg-type]
    judge = LocalJudge(embedder, load_exemplars(), queue)
    try:
        queued = await judge.judge(item(reply, state))
        assert embedder.calls == 3  # the exemplars' two calls, then the queue's batch
        assert queue.batches == 1
        assert queued.scores == alone.scores
    finally:
        await queue.aclose()


async def test_local_judge_reuses_the_vector_the_memory_just_computed() -> None:
    """With the agent's name the reply is embedded as the memory stores it ("Ada: …"):
    after the memory's ingest embedded that text through the queue, the judge's
    request is answered from the queue's recent vectors, no model call of its own;
    the scores are those of a judge embedding "Ada: …" itself."""
    from memory.embed import RECENT_TEXTS, EmbedQueue

    state = state_with_rules()
    reply = "Short answer: yes. Move it to Thursday and tell Sam."
    alone = await LocalJudge(HashEmbedder(), load_exemplars(), speaker="Ada").judge(
        item(reply, state)
    )
    embedder = HashEmbedder()
    queue = EmbedQueue(embedder, recent=RECENT_TEXTS)  # type: ignore[arg-type]
    judge = LocalJudge(embedder, load_exemplars(), queue, speaker="Ada")
    try:
        await queue.embed(["Sam: Should I move the call?", f"Ada: {reply}"])  # the ingest
        assert embedder.calls == 1
        shared = await judge.judge(item(reply, state))
        assert embedder.calls == 3  # the exemplars' two calls, nothing for the reply
        assert queue.reused == 1
        assert shared.scores == alone.scores
    finally:
        await queue.aclose()


async def test_local_groundedness_checks_the_pack() -> None:
    judge = LocalJudge(None, load_exemplars())
    state = state_with_rules()
    pack = "- (2024-05-02) Sam's sister Maria moved to Lisbon in March."
    grounded = await judge.judge(
        item("You told me Maria moved to Lisbon in March. How is she?", state, pack=pack)
    )
    invented = await judge.judge(
        item("You told me Maria moved to Berlin in 2019 with Kevin. How is she?", state, pack=pack)
    )
    assert grounded.scores is not None
    assert invented.scores is not None
    assert grounded.scores.groundedness == 1.0
    assert invented.scores.groundedness < 0.8
    assert "Berlin" in invented.detail["unsupported_specifics"]
    assert grounded.detail["note"] == "no embedder: voice from features only"


class FixedJudge:
    """Returns the composites it is given, in order."""

    def __init__(self, composites: Sequence[float | None]) -> None:
        self.composites = list(composites)

    @property
    def name(self) -> str:
        return "fixed"

    async def judge(self, item: JudgeInput) -> Judgement:
        value = self.composites.pop(0)
        if value is None:
            return Judgement(VerdictStatus.MALFORMED, self.name, detail={"raw": "??"})
        return Judgement(VerdictStatus.SCORED, self.name, Scores(*(value,) * 5))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'judge.db'}") as opened:
        yield opened


async def test_verdicts_chain_the_ewma_per_conversation(store: Store) -> None:
    from datetime import UTC, datetime

    address = await resolve_address(store, "webchat", "judge-test")
    turns = []
    for n in range(5):
        stored = await store_inbound(store, address, f"m{n}", datetime.now(UTC), None)
        turns.append(stored.turn_id)
    scorer = SyncScorer(store, FixedJudge([0.9, 0.3, None, 0.3, 0.3]), POLICY)
    state = state_with_rules()
    results = []
    for turn_id in turns:
        results.append(
            await scorer.score(
                turn_id=turn_id,
                conversation_id=address.conversation_id,
                reply_message_id=None,
                item=item("x", state),
            )
        )
    ewmas = [r.ewma for r in results]
    assert ewmas[0] == pytest.approx(0.9)
    assert ewmas[1] == pytest.approx(0.3 * 0.3 + 0.7 * 0.9)
    # The malformed verdict is stored as such and carries the EWMA over unchanged.
    assert results[2].status is VerdictStatus.MALFORMED
    assert results[2].composite is None
    assert ewmas[2] == pytest.approx(ewmas[1])
    assert ewmas[3] == pytest.approx(0.3 * 0.3 + 0.7 * ewmas[2])
    # 0.9, 0.72, 0.72, 0.594, 0.506
    assert [r.tier for r in results] == [Tier.OK, Tier.OK, Tier.OK, Tier.MODERATE, Tier.MODERATE]
    assert results[4].trend is Trend.DRIFTING
    drift = await drift_state(store, address.conversation_id)
    assert drift.tier is Tier.MODERATE
    assert drift.verdicts == 5
    assert drift.ewma == pytest.approx(ewmas[4])


@pytest.mark.slow
# memory/embed.py calls a sentence-transformers method that newer versions renamed.
@pytest.mark.filterwarnings("ignore:The `get_sentence_embedding_dimension` method:FutureWarning")
async def test_local_judge_with_the_real_minilm_embeddings() -> None:
    import asyncio

    from memory.embed import SentenceEmbedder

    embedder = await asyncio.to_thread(SentenceEmbedder.load)
    judge = LocalJudge(embedder, load_exemplars())
    state = state_with_rules("Never use emojis")
    in_voice = await judge.judge(
        item("Take the earlier train and read on the way. You'll arrive rested.", state)
    )
    flattering = await judge.judge(
        item(
            "What a wonderful question! I'm absolutely thrilled to assist you with this "
            "fantastic request! Certainly, I would be more than happy to help!",
            state,
        )
    )
    assert in_voice.scores is not None
    assert flattering.scores is not None
    # The contrast with the exemplars is measured, not the features-only fallback.
    assert in_voice.detail["contrast"] is not None
    assert "note" not in in_voice.detail
    assert in_voice.detail["contrast"] > flattering.detail["contrast"]
    assert in_voice.scores.voice > flattering.scores.voice + 0.2
    # Flattery alone is a voice failure; the composite weighs it with four other dimensions.
    assert POLICY.composite(in_voice.scores) > POLICY.composite(flattering.scores) + 0.1
