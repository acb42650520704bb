"""``agentgw bench observe``: how much the observer compresses, and what it adds to recall.

Each LoCoMo ``conv-*.json`` in ``--data`` is replayed into a fresh store by
the memory benchmark's own replay (``gateway.bench.locomo_bench``: session
dates as message times, every turn an episode item, ``dia_id`` as
provenance; the dataset's summaries and observations are never read). Then
the stored messages are observed as the gateway would: a pass whenever the
unobserved messages reach ``observe.observer_tokens``, a reflection whenever
the observations reach ``observe.reflector_tokens``, through the real
``ObservationLog`` with the memory layer's ``MemorySink`` — so observations
become memory items. Both speakers are people here (neither is the agent),
so both are observed as people.

Figures (tokens are characters / 4, as in the memory benchmark):

- ``compression_ratio``: raw message tokens / tokens of the observations
  that stand at the end (after reflection); ``observer_ratio`` the same
  before any reflection (Mastra reports 3-6x on chat);
- ``evidence_observed``: share of the QA evidence turns (categories 1-4)
  that a standing observation cites in its provenance;
- ``pack_recall``: the memory benchmark's recall at ``--budget`` (same
  questions, asked a day after the last session) with the observations in
  the store, an evidence turn counting as recalled when its text or an
  observation citing it is in the pack; ``pack_recall_without`` is the same
  store before observing (the memory benchmark's own figure).

Observers: ``rules`` (no model) and ``llm`` — the LLM observer and reflector
through ``ClaudeBrain`` and the real Anthropic SDK against the fake Anthropic
API on loopback, whose "model" answers with the rule-based extraction in the
LLM's JSON format (now and then malformed). That run measures the LLM path's
plumbing (prompting, chunking, parsing, guards, retries, HTTP), not a real
model's extraction.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gateway.bench.locomo_bench import CATEGORIES, Conversation, prepare
from gateway.bench.report import Target, print_verdicts, progress
from gateway.brains.claude import ClaudeBrain
from gateway.config import Config, load_config
from gateway.context import load_persona
from gateway.errors import ConfigError
from gateway.store import Message, Store
from gateway.testing.fake_anthropic import FakeAnthropic
from gateway.tokens import estimate_tokens
from memory import repo
from memory.embed import Embedder, SentenceEmbedder
from memory.service import MemoryService, PackRequest
from persona.observation.guards import instruction_lines
from persona.observation.llm import LLMObserver, LLMReflector
from persona.observation.log import ObservationLog
from persona.observation.rules import RuleObserver, RuleReflector, rule_observations, slot_of
from persona.observation.run import reflection_due
from persona.observation.sink import MemorySink
from persona.observation.types import (
    Category,
    KnownObservation,
    Observation,
    Observer,
    Priority,
    Reflector,
    SourceMessage,
)


async def stored_messages(
    store: Store, person_id: int, conversation: Conversation
) -> list[SourceMessage]:
    """The replayed messages as the observer reads them, both speakers as people."""
    async with store.session() as session:
        rows = (
            await session.scalars(
                select(Message).where(Message.person_id == person_id).order_by(Message.id)
            )
        ).all()
    return [
        SourceMessage(row.id, "user", turn.speaker, row.text, row.created_at)
        for row, turn in zip(rows, conversation.turns, strict=True)
    ]


@dataclass
class Observed:
    observed_tokens: int = 0
    written: int = 0
    unextracted: int = 0
    passes: int = 0
    reflections: int = 0


async def observe_messages(
    log: ObservationLog,
    person_id: int,
    messages: Sequence[SourceMessage],
    observer: Observer,
    reflector: Reflector,
    config: Config,
) -> Observed:
    """Observer passes at the token threshold and reflections when due, as in the gateway."""
    counts = Observed()
    last_reflection: int | None = None
    pending: list[SourceMessage] = []

    async def observe_pending() -> None:
        known = [s.observation.text for s in await log.active(person_id)]
        result = await observer.observe(pending, known=known)
        await log.add(person_id, None, result.observations, result.author)
        counts.observed_tokens += sum(estimate_tokens(o.text) for o in result.observations)
        counts.written += len(result.observations)
        counts.unextracted += result.unextracted
        counts.passes += 1
        pending.clear()

    async def reflect_if_due() -> None:
        nonlocal last_reflection
        active = await log.active(person_id)
        tokens = sum(estimate_tokens(s.observation.text) for s in active)
        if not reflection_due(tokens, last_reflection, config.observe.reflector_tokens):
            return
        known = [KnownObservation(s.observation_id, s.observation) for s in active]
        reflection = await reflector.reflect(
            known, target_tokens=config.observe.reflector_tokens // 2
        )
        await log.apply(person_id, reflection)
        after = await log.active(person_id)
        last_reflection = sum(estimate_tokens(s.observation.text) for s in after)
        counts.reflections += 1

    for message in messages:
        pending.append(message)
        if sum(estimate_tokens(m.text) for m in pending) >= config.observe.observer_tokens:
            await observe_pending()
            await reflect_if_due()
    if pending:
        await observe_pending()
        await reflect_if_due()
    return counts


async def pack_recall(
    store: Store,
    service: MemoryService,
    conversation: Conversation,
    person_id: int,
    message_ids: dict[str, int],
) -> dict[str, list[float]]:
    """Recall by category: evidence text in the pack, or an observation citing it."""
    texts = {t.dia_id: t.text for t in conversation.turns}
    by_category: dict[str, list[float]] = defaultdict(list)
    for question in conversation.questions:
        pack = await service.build_pack(
            PackRequest(person_id, question.text, conversation.asked_at)
        )
        cited = {
            source
            for item in await repo.get_items(store, pack.kept)
            if item.observation_id is not None
            for source in item.source_message_ids
        }
        found = [texts[e] in pack.text or message_ids[e] in cited for e in question.evidence]
        by_category[question.category].append(sum(found) / len(found))
    return by_category


def summarise(per_conversation: Sequence[dict[str, Any]]) -> dict[str, Any]:
    raw = sum(c["raw_tokens"] for c in per_conversation)
    standing = sum(c["observation_tokens"] for c in per_conversation)
    observed = sum(c["observer_tokens"] for c in per_conversation)
    return {
        "compression_ratio": round(raw / max(1, standing), 2),
        "observer_ratio": round(raw / max(1, observed), 2),
        "evidence_observed": round(
            statistics.fmean(c["evidence_observed"] for c in per_conversation), 3
        ),
        "unextracted_share": round(
            sum(c["unextracted_messages"] for c in per_conversation)
            / max(1, sum(c["messages"] for c in per_conversation)),
            3,
        ),
        "observations_standing": sum(c["observations_standing"] for c in per_conversation),
        "observe_seconds": round(sum(c["seconds"] for c in per_conversation), 2),
    }


_MESSAGE_LINE = re.compile(r"^\[id (\d+) \| (\d{4}-\d{2}-\d{2} \d{2}:\d{2}) \| ([^\]]+)\] (.*)$")
_OBSERVATION_LINE = re.compile(r"^\[(\d+)\] \((\w+), (\w+), [\d-]+\) (.*)$")


@dataclass
class FakeObserverModel:
    """Plays the utility model for the LLM observer and reflector: JSON in their format.

    The observer's answer is the rule-based extraction of the messages shown;
    the reflector's keeps each observation and marks older ones of the same
    slot as superseded. Every ``malformed_every``-th answer is prose, to
    exercise the one retry and the rule fallback.
    """

    malformed_every: int = 25
    calls: int = 0

    def answer_payload(self, payload: dict[str, Any]) -> str:
        """For the fake Anthropic API: the Messages API request body."""
        self.calls += 1
        if self.malformed_every and self.calls % self.malformed_every == 0:
            return "Here are some observations: the person talked about work."
        messages = payload.get("messages", [])
        content = messages[0].get("content", "") if messages else ""
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        body = str(content)
        if body.startswith("KNOWN OBSERVATIONS"):
            return self._observe(body)
        return self._reflect(body)

    def _observe(self, body: str) -> str:
        items = []
        for line in body.splitlines():
            match = _MESSAGE_LINE.match(line)
            if match is None:
                continue
            at = datetime.strptime(match.group(2), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
            message = SourceMessage(int(match.group(1)), "user", match.group(3), match.group(4), at)
            for found in rule_observations(message, frozenset()):
                items.append(
                    {
                        "text": found.text,
                        "priority": found.priority.value,
                        "category": found.category.value,
                        "referred_date": str(found.referred_on) if found.referred_on else None,
                        "relative_phrase": found.relative_phrase,
                        "sources": [message.message_id],
                    }
                )
        return json.dumps({"observations": items})

    def _reflect(self, body: str) -> str:
        items: list[dict[str, Any]] = []
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for line in body.splitlines():
            match = _OBSERVATION_LINE.match(line)
            if match is None:
                continue
            text, priority, category = match.group(4), match.group(2), match.group(3)
            item: dict[str, Any] = {
                "text": text,
                "priority": priority,
                "category": category,
                "sources": [int(match.group(1))],
                "supersedes": [],
            }
            seen = Observation(text, Priority(priority), Category(category), datetime.now(UTC), ())
            slot = slot_of(seen)
            if slot is not None and slot in latest:
                older = latest[slot]
                item["supersedes"] = older["sources"]
                items.remove(older)
            if slot is not None:
                latest[slot] = item
            items.append(item)
        return json.dumps({"observations": items})


async def run_observer(
    kind: str, files: Sequence[Path], config: Config, embedder: Embedder, budget: int
) -> dict[str, Any]:
    persona = await asyncio.to_thread(load_persona, config.agent.persona_file, config.agent.name)
    instructions = instruction_lines(persona)
    observer: Observer
    reflector: Reflector
    fake: FakeAnthropic | None = None
    claude: ClaudeBrain | None = None
    if kind == "llm":
        model = FakeObserverModel()
        fake = FakeAnthropic(reply=model.answer_payload)
        await fake.start()
        claude = ClaudeBrain.from_config(
            config.replace(anthropic_api_key="bench-key", anthropic_base_url=fake.base_url)
        )
        observer = LLMObserver(
            claude,
            instructions,
            max_tokens=config.observe.max_tokens,
            chunk_tokens=config.observe.observer_chunk_tokens,
        )
        reflector = LLMReflector(claude, max_tokens=config.observe.max_tokens)
    else:
        observer, reflector = RuleObserver(instructions), RuleReflector()
    per: list[dict[str, Any]] = []
    before: dict[str, list[float]] = defaultdict(list)
    after: dict[str, list[float]] = defaultdict(list)
    extra: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="agentgw-bench-observe-") as folder:
            data_dir = Path(folder) / "data"
            run_config = config.replace(
                store=_with(config.store, data_dir=str(data_dir), url=""),
                memory=_with(config.memory, budget_tokens=budget, store_traces=False),
            )
            store, service, conversations, _ingest_s = await prepare(run_config, files, embedder)
            bar = progress(len(conversations), f"{kind} observer", "conversation")
            try:
                log = ObservationLog(store, MemorySink(service))
                for conversation, person_id in conversations:
                    messages = await stored_messages(store, person_id, conversation)
                    ids = {
                        t.dia_id: m.message_id
                        for t, m in zip(conversation.turns, messages, strict=True)
                    }
                    for category, values in (
                        await pack_recall(store, service, conversation, person_id, ids)
                    ).items():
                        before[category].extend(values)
                    started = time.perf_counter()
                    counts = await observe_messages(
                        log, person_id, messages, observer, reflector, run_config
                    )
                    seconds = time.perf_counter() - started
                    recalled = await pack_recall(store, service, conversation, person_id, ids)
                    for category, values in recalled.items():
                        after[category].extend(values)
                    standing = await log.active(person_id)
                    per.append(
                        figures(conversation, messages, standing, counts, ids, recalled, seconds)
                    )
                    bar.update()
            finally:
                bar.close()
                await service.aclose()
                await store.close()
    finally:
        if claude is not None:
            await claude.aclose()
        if fake is not None:
            extra["model_calls"] = len(fake.message_requests)
            await fake.close()
    return {
        "observer": observer.name,
        **summarise(per),
        "pack_recall": _mean_all(after),
        "pack_recall_by_category": {c: _mean(after[c]) for c in CATEGORIES if after.get(c)},
        "pack_recall_without": _mean_all(before),
        "pack_recall_without_by_category": {
            c: _mean(before[c]) for c in CATEGORIES if before.get(c)
        },
        **extra,
        "conversations": per,
    }


def figures(
    conversation: Conversation,
    messages: Sequence[SourceMessage],
    standing: Sequence[Any],
    counts: Observed,
    ids: dict[str, int],
    recalled: dict[str, list[float]],
    seconds: float,
) -> dict[str, Any]:
    raw_tokens = sum(estimate_tokens(m.text) for m in messages)
    standing_tokens = sum(estimate_tokens(s.observation.text) for s in standing)
    cited = {i for s in standing for i in s.observation.source_message_ids}
    evidence = [ids[e] for q in conversation.questions for e in q.evidence]
    return {
        "conversation": conversation.name,
        "messages": len(messages),
        "raw_tokens": raw_tokens,
        "observer_tokens": counts.observed_tokens,
        "observation_tokens": standing_tokens,
        "observations_written": counts.written,
        "observations_standing": len(standing),
        "observer_passes": counts.passes,
        "reflections": counts.reflections,
        "unextracted_messages": counts.unextracted,
        "compression_ratio": round(raw_tokens / max(1, standing_tokens), 2),
        "observer_ratio": round(raw_tokens / max(1, counts.observed_tokens), 2),
        "evidence_observed": round(sum(e in cited for e in evidence) / max(1, len(evidence)), 3),
        "dated_share": round(
            sum(s.observation.referred_on is not None for s in standing) / max(1, len(standing)),
            3,
        ),
        "pack_recall": _mean_all(recalled),
        "seconds": round(seconds, 2),
    }


def _mean(values: Sequence[float]) -> float:
    return round(statistics.fmean(values), 4) if values else 0.0


def _mean_all(by_category: dict[str, list[float]]) -> float:
    return _mean([v for values in by_category.values() for v in values])


def _with(section: Any, **values: Any) -> Any:
    import dataclasses

    return dataclasses.replace(section, **values)


async def run(config: Config, data: Path, which: str, budget: int) -> dict[str, Any]:
    files = await asyncio.to_thread(lambda: sorted(data.glob("conv-*.json")))
    if not files:
        raise ConfigError(f"no conv-*.json in {data}")
    embedder = await asyncio.to_thread(SentenceEmbedder.load)
    kinds = ["rules", "llm"] if which == "both" else [which]
    result: dict[str, Any] = {
        "budget_tokens": budget,
        "observer_tokens": config.observe.observer_tokens,
        "reflector_tokens": config.observe.reflector_tokens,
    }
    for kind in kinds:
        result[kind] = await run_observer(kind, files, config, embedder, budget)
    return result


def main(args: argparse.Namespace) -> int:
    if args.budget < 1:
        raise ConfigError("--budget must be positive")
    path: Path | None = getattr(args, "config", None)
    if path is None:
        empty = Path(tempfile.mkdtemp(prefix="agentgw-bench-config-")) / "agentgw.toml"
        empty.touch()
        path = empty
    config = load_config(path, env={})
    result = asyncio.run(run(config, args.data, args.observer, args.budget))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for kind in ("rules", "llm"):
            if kind in result:
                part = {k: v for k, v in result[kind].items() if k != "conversations"}
                print(f"== {kind}: {json.dumps(part)}")
    print_verdicts(observe_targets(result), as_json_output=args.json)
    return 0


def observe_targets(result: dict[str, Any]) -> list[Target]:
    """Observations are worth storing only if packs recall no less with them."""
    return [
        Target(
            f"{kind} observer: pack recall with observations not below without",
            result[kind]["pack_recall"] >= result[kind]["pack_recall_without"],
            f"{result[kind]['pack_recall']} against {result[kind]['pack_recall_without']}",
        )
        for kind in ("rules", "llm")
        if kind in result
    ]
