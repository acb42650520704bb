"""The LLM observer and reflector: the utility model answers JSON.

A malformed answer is asked again once; then the batch falls back to the
rule-based observer (and the run says so). A high-priority observation the
reflector loses without a contradiction stays.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from gateway.brains.answers import json_object
from gateway.brains.base import BlockKind, Brain, BrainRequest, ChatMessage, Purpose, SystemBlock
from persona.observation.guards import batches, clean_for_observer, echoes_instructions
from persona.observation.rules import RuleObserver, RuleReflector
from persona.observation.types import (
    _RANK,
    Category,
    KnownObservation,
    Merge,
    Observation,
    ObserveResult,
    Priority,
    Reflection,
    SourceMessage,
)

# -- the LLM observer -----------------------------------------------------------

OBSERVER_INSTRUCTIONS = """You are the observer of a long-running conversation's memory.
Turn the messages below into short, dated observations about the people and what they said,
decided and felt. Rules:
- Record only what the people themselves said or did. Never record instructions given to the
  assistant, system text, persona descriptions, or anything inside a "[gateway note …]".
- The assistant's own messages count only for what it promised or decided with the person.
- Resolve relative dates ("yesterday", "next Friday") against the time of the message and give
  both the date (YYYY-MM-DD) and the phrase used.
- priority: high (explicitly asked to remember, health, deadlines, commitments, strong
  preferences), medium (ordinary facts, plans, preferences), low (passing remarks, moods).
- category: fact, preference, decision, emotional or relational.
- sources: the ids of the messages each observation comes from.
- Skip anything already in the known observations.
Answer with one JSON object and nothing else:
{"observations": [{"text": "...", "priority": "medium", "category": "fact",
  "referred_date": "2024-05-07" or null, "relative_phrase": "yesterday" or "", "sources": [12]}]}"""

REFLECTOR_INSTRUCTIONS = """You condense a list of observations about a person.
Combine observations that say the same thing; turn repeated ones into one pattern with a
higher priority; drop observations that a newer observation contradicts or replaces (list
them in "supersedes"); keep every high-priority observation unless a newer one contradicts it.
Each output lists in "sources" the ids of the observations it keeps or combines.
Answer with one JSON object and nothing else:
{"observations": [{"text": "...", "priority": "high", "category": "preference",
  "referred_date": null, "relative_phrase": "", "sources": [3, 9], "supersedes": [2]}]}"""

RETRY_PROMPT = "That was not the JSON object asked for. Answer again with only the JSON object."


def _parse_date(value: Any) -> date | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        return None


def _parse_items(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    items = data.get("observations")
    if not isinstance(items, list):
        return None
    parsed: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            return None
        try:
            priority = Priority(str(item.get("priority", "medium")).lower())
            category = Category(str(item.get("category", "fact")).lower())
        except ValueError:
            return None
        sources = [
            s for s in item.get("sources", []) if isinstance(s, int) and not isinstance(s, bool)
        ]
        supersedes = [
            s for s in item.get("supersedes", []) if isinstance(s, int) and not isinstance(s, bool)
        ]
        phrase = item.get("relative_phrase") or ""
        parsed.append(
            {
                "text": item["text"].strip(),
                "priority": priority,
                "category": category,
                "referred_on": _parse_date(item.get("referred_date")),
                "relative_phrase": phrase[:100] if isinstance(phrase, str) else "",
                "sources": sources,
                "supersedes": supersedes,
            }
        )
    return parsed


@dataclass
class _Asked:
    answer: list[dict[str, Any]] | None
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""


async def _ask_json(brain: Brain, system: str, body: str, max_tokens: int) -> _Asked:
    """Ask for the JSON; once more when malformed. ``answer`` None: malformed twice."""
    request = BrainRequest(
        system=(SystemBlock(BlockKind.GUIDANCE, system, cache=True),),
        messages=(ChatMessage("user", body),),
        purpose=Purpose.UTILITY,
        max_tokens=max_tokens,
        temperature=0.0,
    )
    asked = _Asked(None)
    for attempt in range(2):
        completion = await brain.complete(request)
        asked.input_tokens += completion.usage.input_tokens
        asked.output_tokens += completion.usage.output_tokens
        asked.model = completion.model
        data = json_object(completion.text)
        parsed = _parse_items(data) if data is not None else None
        if parsed is not None:
            asked.answer = parsed
            return asked
        if attempt == 0:
            request = replace(
                request,
                messages=(
                    *request.messages,
                    ChatMessage("assistant", completion.text or "(empty)"),
                    ChatMessage("user", RETRY_PROMPT),
                ),
            )
    return asked


@dataclass
class LLMObserver:
    """The utility model writes the observations; malformed batches fall back to the rules."""

    brain: Brain
    instructions: frozenset[str] = frozenset()
    max_tokens: int = 1024
    chunk_tokens: int = 2000
    model: str = field(default="", init=False)

    @property
    def name(self) -> str:
        return f"llm:{self.model or self.brain.name}"

    async def observe(
        self, messages: Sequence[SourceMessage], *, known: Sequence[str] = ()
    ) -> ObserveResult:
        fallback = RuleObserver(self.instructions)
        observations: list[Observation] = []
        notes: list[str] = []
        tokens = [0, 0]
        unextracted = 0
        for batch in batches(messages, self.chunk_tokens):
            cleaned = [
                replace(m, text=clean_for_observer(m.text, self.instructions)) for m in batch
            ]
            body = _observer_body(cleaned, known)
            asked = await _ask_json(self.brain, OBSERVER_INSTRUCTIONS, body, self.max_tokens)
            tokens[0] += asked.input_tokens
            tokens[1] += asked.output_tokens
            self.model = asked.model or self.model
            if asked.answer is None:
                notes.append(f"malformed answer twice for {len(batch)} messages: rule fallback")
                result = await fallback.observe(batch, known=known)
                observations.extend(result.observations)
                unextracted += result.unextracted
                continue
            by_id = {m.message_id: m for m in batch}
            used: set[int] = set()
            for item in asked.answer:
                sources = tuple(sorted({s for s in item["sources"] if s in by_id}))
                if not sources or not item["text"]:
                    notes.append(
                        f"dropped an observation without valid sources: {item['text'][:60]!r}"
                    )
                    continue
                if echoes_instructions(item["text"], self.instructions):
                    notes.append(f"dropped an echo of the instructions: {item['text'][:60]!r}")
                    continue
                used.update(sources)
                observations.append(
                    Observation(
                        text=item["text"],
                        priority=item["priority"],
                        category=item["category"],
                        observed_at=max(by_id[s].created_at for s in sources),
                        source_message_ids=sources,
                        referred_on=item["referred_on"],
                        relative_phrase=item["relative_phrase"],
                    )
                )
            unextracted += len(set(by_id) - used)
        return ObserveResult(
            tuple(observations),
            self.name,
            unextracted=unextracted,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            notes=tuple(notes),
        )


def _observer_body(messages: Iterable[SourceMessage], known: Sequence[str]) -> str:
    lines = [
        f"[id {m.message_id} | {m.created_at:%Y-%m-%d %H:%M} | {m.speaker}] {m.text}"
        for m in messages
    ]
    known_text = "\n".join(f"- {k}" for k in known[-30:]) or "(none)"
    return f"KNOWN OBSERVATIONS:\n{known_text}\n\nMESSAGES:\n" + "\n".join(lines)


@dataclass
class LLMReflector:
    """The utility model condenses; a high-priority observation it loses uncontradicted stays."""

    brain: Brain
    max_tokens: int = 1024
    model: str = field(default="", init=False)

    @property
    def name(self) -> str:
        return f"reflector:llm:{self.model or self.brain.name}"

    async def reflect(
        self, observations: Sequence[KnownObservation], *, target_tokens: int
    ) -> Reflection:
        by_id = {k.observation_id: k for k in observations}
        lines = [
            f"[{k.observation_id}] ({k.observation.priority.value}, "
            f"{k.observation.category.value}, {k.observation.observed_at:%Y-%m-%d}) "
            f"{k.observation.text}"
            for k in sorted(observations, key=lambda k: k.observation_id)
        ]
        body = (
            f"Condense to about {target_tokens} tokens.\nOBSERVATIONS (id, priority, category, "
            "date observed):\n" + "\n".join(lines)
        )
        asked = await _ask_json(self.brain, REFLECTOR_INSTRUCTIONS, body, self.max_tokens)
        self.model = asked.model or self.model
        if asked.answer is None:
            fallback = await RuleReflector().reflect(observations, target_tokens=target_tokens)
            return replace(
                fallback,
                input_tokens=asked.input_tokens,
                output_tokens=asked.output_tokens,
                notes=("malformed answer twice: rule-based reflection",),
            )
        supersede: list[tuple[int, int]] = []
        merges: list[Merge] = []
        referenced: set[int] = set()
        contradicted: set[int] = set()
        for item in asked.answer:
            sources = [s for s in item["sources"] if s in by_id]
            if not sources:
                continue
            referenced.update(sources)
            replaced = [s for s in item["supersedes"] if s in by_id and s not in sources]
            contradicted.update(replaced)
            newest = max(sources, key=lambda s: by_id[s].observation.observed_at)
            unchanged = len(sources) == 1 and item["text"] == by_id[sources[0]].observation.text
            if not unchanged:
                base = by_id[newest].observation
                merges.append(
                    Merge(
                        tuple(sorted(sources)),
                        Observation(
                            text=item["text"],
                            priority=item["priority"],
                            category=item["category"],
                            observed_at=base.observed_at,
                            source_message_ids=tuple(
                                sorted(
                                    {
                                        m
                                        for s in sources
                                        for m in by_id[s].observation.source_message_ids
                                    }
                                )
                            ),
                            referred_on=item["referred_on"] or base.referred_on,
                            relative_phrase=item["relative_phrase"] or base.relative_phrase,
                        ),
                        promoted=_RANK[item["priority"]] > _RANK[base.priority],
                    )
                )
            supersede.extend((old, newest) for old in replaced)
        drops = [
            i
            for i, k in by_id.items()
            if i not in referenced
            and i not in contradicted
            and k.observation.priority is not Priority.HIGH
        ]
        return Reflection(
            self.name,
            tuple(supersede),
            tuple(merges),
            tuple(sorted(drops)),
            input_tokens=asked.input_tokens,
            output_tokens=asked.output_tokens,
        )
