"""The LLM judge: the utility model scores a reply as JSON.

A malformed answer is asked again once and then recorded as malformed, never
invented; a second sample is taken only when the composite lands near a tier
line.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.brains.answers import json_object
from gateway.brains.base import BlockKind, Brain, BrainRequest, ChatMessage, Purpose, SystemBlock
from gateway.errors import BrainError
from persona.judge import (
    DIMENSIONS,
    JudgeInput,
    Judgement,
    Scores,
    SyncPolicy,
)
from persona.models import VerdictStatus

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
    data = json_object(text)
    if data is None:
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
