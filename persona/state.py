"""PersonaState: the agent's measured voice beside its fixed core identity.

Numeric traits move by an EWMA (alpha, 0.3 by default) toward what the
assistant's own in-voice replies show; voice markers, relational stance and
formatting preferences are weighted lists that decay and keep their top K;
hard rules change only when the person confirms a proposed rule. Every change
is a new stored version: versions are listed, diffed and rolled back (a
rollback is itself a new version, so history is never rewritten).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from gateway.errors import InputError, StoreError
from gateway.store import Store
from gateway.store.models import utcnow
from gateway.tokens import estimate_tokens
from memory.sanitize import fold_lines, sanitize
from persona.features import TRAITS, mean_traits, measure
from persona.models import PersonaRule, PersonaVersion, RuleStatus

# Trait moves smaller than this do not make a new version.
_MIN_TRAIT_CHANGE = 0.005


@dataclass(frozen=True)
class Weighted:
    text: str
    weight: float


@dataclass(frozen=True)
class HardRule:
    rule_id: int
    text: str


def _quoted(value: Weighted) -> str:
    """A phrase measured from stored replies, as a prompt may quote it (memory/sanitize.py)."""
    return sanitize(value.text).text


def _rule(rule: HardRule) -> str:
    """A hard rule on one line. Not filtered: the owner confirmed it as an instruction
    (the visible, editable place for "from now on answer in French")."""
    return fold_lines(rule.text)


@dataclass(frozen=True)
class PersonaSignal:
    """What one pass over the assistant's own turns showed of its voice.

    It carries no rules: hard rules only ever come from a confirmed proposal.
    """

    traits: Mapping[str, float] = field(default_factory=dict)
    voice_markers: Mapping[str, float] = field(default_factory=dict)
    stance: Mapping[str, float] = field(default_factory=dict)
    formatting: Mapping[str, float] = field(default_factory=dict)
    replies: int = 0


@dataclass(frozen=True)
class MergePolicy:
    alpha: float = 0.3
    decay: float = 0.85
    min_weight: float = 0.05
    top_k: int = 8


def _merge_weighted(
    old: Sequence[Weighted], seen: Mapping[str, float], policy: MergePolicy
) -> tuple[Weighted, ...]:
    weights = {item.text: item.weight * policy.decay for item in old}
    for text, weight in seen.items():
        weights[text] = weights.get(text, 0.0) + policy.alpha * weight
    kept = [Weighted(t, round(w, 4)) for t, w in weights.items() if w >= policy.min_weight]
    kept.sort(key=lambda item: (-item.weight, item.text))
    return tuple(kept[: policy.top_k])


@dataclass(frozen=True)
class PersonaState:
    traits: Mapping[str, float]
    voice_markers: tuple[Weighted, ...] = ()
    stance: tuple[Weighted, ...] = ()
    formatting: tuple[Weighted, ...] = ()
    hard_rules: tuple[HardRule, ...] = ()

    def merged(self, signal: PersonaSignal, policy: MergePolicy) -> PersonaState:
        """The state after one observation of the voice; hard rules are untouched."""
        if signal.replies == 0:
            return self
        traits = dict(self.traits)
        for name, seen in signal.traits.items():
            if name in TRAITS:
                before = traits.get(name, seen)
                traits[name] = round((1 - policy.alpha) * before + policy.alpha * seen, 4)
        return replace(
            self,
            traits=traits,
            voice_markers=_merge_weighted(self.voice_markers, signal.voice_markers, policy),
            stance=_merge_weighted(self.stance, signal.stance, policy),
            formatting=_merge_weighted(self.formatting, signal.formatting, policy),
        )

    def with_rule(self, rule: HardRule) -> PersonaState:
        if any(r.rule_id == rule.rule_id for r in self.hard_rules):
            return self
        return replace(self, hard_rules=(*self.hard_rules, rule))

    def without_rule(self, rule_id: int) -> PersonaState:
        return replace(self, hard_rules=tuple(r for r in self.hard_rules if r.rule_id != rule_id))

    def differs_from(self, other: PersonaState) -> bool:
        if any(
            abs(self.traits.get(n, 0.0) - other.traits.get(n, 0.0)) >= _MIN_TRAIT_CHANGE
            for n in TRAITS
        ):
            return True
        return (
            [i.text for i in self.voice_markers] != [i.text for i in other.voice_markers]
            or [i.text for i in self.stance] != [i.text for i in other.stance]
            or [i.text for i in self.formatting] != [i.text for i in other.formatting]
            or self.hard_rules != other.hard_rules
        )

    # -- rendering ---------------------------------------------------------

    def describe_traits(self) -> str:
        words = {
            "directness": ("hedging", "balanced", "direct"),
            "formality": ("casual", "plain", "formal"),
            "verbosity": ("brief", "moderate length", "detailed"),
            "humor": ("serious", "lightly humorous", "playful"),
            "warmth": ("cool", "friendly", "warm"),
            "technical_depth": ("non-technical", "technical when needed", "deeply technical"),
        }
        parts = []
        for name in TRAITS:
            if name not in self.traits:
                continue
            value = self.traits[name]
            low, mid, high = words[name]
            parts.append(low if value < 0.35 else high if value > 0.65 else mid)
        return ", ".join(parts)

    def render_rules(self) -> str:
        if not self.hard_rules:
            return ""
        lines = "\n".join(f"- {_rule(rule)}" for rule in self.hard_rules)
        return f"Hard rules the person confirmed (always follow them):\n{lines}"

    def render_contract(self) -> str:
        """The part of the persona block that comes from the state (after the file)."""
        parts = [f"Your measured voice: {self.describe_traits()}."]
        if self.voice_markers:
            markers = ", ".join(f'"{_quoted(m)}"' for m in self.voice_markers[:4])
            parts.append(f"Phrases typical of you: {markers}.")
        if self.formatting:
            formatting = ", ".join(_quoted(f) for f in self.formatting[:3])
            parts.append("Formatting you use: " + formatting)
        rules = self.render_rules()
        if rules:
            parts.append(rules)
        return "\n".join(parts)

    def render_reinforcement(self, max_tokens: int) -> str:
        """A one-line reminder of the voice, for mild drift."""
        text = f"Stay in your own voice: {self.describe_traits()}."
        if self.hard_rules:
            text += " Keep your hard rules: " + "; ".join(_rule(r) for r in self.hard_rules) + "."
        return _fit(text, max_tokens)

    def render_anchor(self, min_tokens: int, max_tokens: int, name: str) -> str:
        """A 50-100 token persona anchor for the middle of a long history."""
        parts = [f"{name}, this is still you: {self.describe_traits()}."]
        if self.stance:
            stance = ", ".join(_quoted(s) for s in self.stance[:2])
            parts.append("Toward the person you are " + stance)
        if self.formatting:
            parts.append("You write in " + ", ".join(_quoted(f) for f in self.formatting[:2]) + ".")
        if self.hard_rules:
            parts.append("Hard rules: " + "; ".join(_rule(r) for r in self.hard_rules) + ".")
        if self.voice_markers:
            phrases = ", ".join(_quoted(m) for m in self.voice_markers[:3])
            parts.append("Typical phrases: " + phrases)
        parts.append(
            "Answer plainly and briefly, say when you do not know, no flattery, and do not "
            "copy the tone of earlier replies that strayed from this voice."
        )
        text = " ".join(parts)
        while estimate_tokens(text) < min_tokens:
            text += " Keep the person's own words and facts at the centre of the answer."
        return _fit(text, max_tokens)

    # -- storage form ------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        def items(values: Sequence[Weighted]) -> list[list[Any]]:
            return [[v.text, v.weight] for v in values]

        return {
            "traits": {name: self.traits[name] for name in TRAITS if name in self.traits},
            "voice_markers": items(self.voice_markers),
            "stance": items(self.stance),
            "formatting": items(self.formatting),
            "hard_rules": [[r.rule_id, r.text] for r in self.hard_rules],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PersonaState:
        def items(key: str) -> tuple[Weighted, ...]:
            return tuple(Weighted(str(t), float(w)) for t, w in data.get(key, []))

        return cls(
            traits={str(k): float(v) for k, v in data.get("traits", {}).items()},
            voice_markers=items("voice_markers"),
            stance=items("stance"),
            formatting=items("formatting"),
            hard_rules=tuple(HardRule(int(i), str(t)) for i, t in data.get("hard_rules", [])),
        )


def _fit(text: str, max_tokens: int) -> str:
    limit = max_tokens * 4
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return cut[: cut.rfind(" ")] + "…" if " " in cut else cut + "…"


# -- exemplars and the first state -------------------------------------------


@dataclass(frozen=True)
class Exemplars:
    in_voice: tuple[str, ...]
    off_voice: tuple[str, ...]


def load_exemplars(path: str = "") -> Exemplars:
    """The exemplar file (or the bundled one): "- " lines under In voice / Off voice."""
    if path:
        text = Path(path).read_text(encoding="utf-8")
    else:
        text = resources.files("persona").joinpath("exemplars.md").read_text(encoding="utf-8")
    sections: dict[str, list[str]] = {"in": [], "off": []}
    current: str | None = None
    for line in text.splitlines():
        heading = line.strip().lower()
        if heading.startswith("## "):
            current = "in" if "in voice" in heading else "off" if "off voice" in heading else None
        elif current and line.startswith("- "):
            sections[current].append(line[2:].strip().replace("\\n", "\n"))
    if not sections["in"]:
        raise InputError(f"exemplars {path or '(bundled)'}: no '## In voice' replies")
    return Exemplars(tuple(sections["in"]), tuple(sections["off"]))


def initial_state(exemplars: Exemplars, policy: MergePolicy) -> PersonaState:
    """Version 1: traits and habits measured on the in-voice exemplars."""
    replies = exemplars.in_voice
    formatting: dict[str, float] = {}
    stance: dict[str, float] = {}
    for reply in replies:
        features = measure(reply)
        for key, weight in features.formatting().items():
            formatting[key] = formatting.get(key, 0.0) + weight / len(replies)
        for key, weight in features.stance().items():
            stance[key] = stance.get(key, 0.0) + weight / len(replies)
    seed = MergePolicy(alpha=1.0, decay=policy.decay, min_weight=0.2, top_k=policy.top_k)
    empty = PersonaState(traits={})
    signal = PersonaSignal(
        traits=mean_traits(replies), stance=stance, formatting=formatting, replies=len(replies)
    )
    return empty.merged(signal, seed)


# -- versions and rules in the store -----------------------------------------


@dataclass(frozen=True)
class VersionInfo:
    version: int
    state: PersonaState
    source: str
    reason: str
    created_at: datetime


@dataclass(frozen=True)
class RuleInfo:
    rule_id: int
    text: str
    status: RuleStatus
    person_id: int | None
    source_message_id: int | None
    proposed_at: datetime
    decided_at: datetime | None


def _version_info(row: PersonaVersion) -> VersionInfo:
    return VersionInfo(
        row.version, PersonaState.from_json(row.state), row.source, row.reason, row.created_at
    )


def _rule_info(row: PersonaRule) -> RuleInfo:
    return RuleInfo(
        row.id,
        row.text,
        row.status,
        row.person_id,
        row.source_message_id,
        row.proposed_at,
        row.decided_at,
    )


def normalize_rule(text: str) -> str:
    cleaned = re.sub(r"\s+", " ", text).strip().rstrip(".!")
    return cleaned[:1].upper() + cleaned[1:] if cleaned else cleaned


# Built once: the judge asks every turn (issue 28, "CPU per turn").
_NEWEST_VERSION = select(func.max(PersonaVersion.version))


class PersonaBook:
    """The versions of the PersonaState and the proposed rules, in the store."""

    def __init__(self, store: Store, seed: PersonaState) -> None:
        self.store = store
        self.seed = seed
        # The last version ``at`` read: versions never change, so it is parsed once.
        self._known: VersionInfo | None = None
        # One reading of a version not known yet at a time: the many first turns of a
        # gateway's start read and parse it once, and write the seed once, where each
        # used to (a hundred sessions and sixty failed seed writes at 100 pages).
        self._reading = asyncio.Lock()

    async def latest(self) -> VersionInfo:
        """The newest version, as ``current``, reading only its number when it is known."""
        version = await self.store.read(lambda connection: connection.scalar(_NEWEST_VERSION))
        return await self.at(version)

    async def at(self, version: int | None) -> VersionInfo:
        """Version ``version`` (None: there is none yet, the seed becomes version 1)."""
        known = self._known
        if known is not None and known.version == version:
            return known
        async with self._reading:
            known = self._known
            if known is not None and (known.version == version or version is None):
                # None was read before a concurrent turn wrote the seed: it is that one.
                return known
            info = await self.current() if version is None else await self.get(version)
            self._known = info
            return info

    async def current(self) -> VersionInfo:
        """The newest version; the seed becomes version 1 on first use."""
        for _attempt in range(2):
            async with self.store.reader() as session:
                row = await session.scalar(
                    select(PersonaVersion).order_by(PersonaVersion.version.desc()).limit(1)
                )
                if row is not None:
                    return _version_info(row)
            try:
                async with self.store.session() as session:
                    seed = PersonaVersion(
                        version=1,
                        state=self.seed.to_json(),
                        source="init",
                        reason="measured from the exemplar replies",
                        created_at=utcnow(),
                    )
                    session.add(seed)
                    await session.flush()
                    return _version_info(seed)
            except StoreError as exc:
                # Two first turns at once: the other one wrote version 1; read it.
                if not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise StoreError("persona version 1 could not be written or read")

    async def versions(self) -> list[VersionInfo]:
        async with self.store.reader() as session:
            rows = (
                await session.scalars(select(PersonaVersion).order_by(PersonaVersion.version))
            ).all()
        return [_version_info(row) for row in rows]

    async def get(self, version: int) -> VersionInfo:
        async with self.store.reader() as session:
            row = await session.scalar(
                select(PersonaVersion).where(PersonaVersion.version == version)
            )
        if row is None:
            raise InputError(f"persona version {version} does not exist", code="not_found")
        return _version_info(row)

    async def commit(self, state: PersonaState, source: str, reason: str) -> VersionInfo:
        """Store ``state`` as the next version (a concurrent writer gets the one after)."""
        for _attempt in range(3):
            try:
                async with self.store.session() as session:
                    latest = await session.scalar(select(func.max(PersonaVersion.version)))
                    row = PersonaVersion(
                        version=(latest or 0) + 1,
                        state=state.to_json(),
                        source=source,
                        reason=reason[:300],
                        created_at=utcnow(),
                    )
                    session.add(row)
                    await session.flush()
                    return _version_info(row)
            except StoreError as exc:
                if not isinstance(exc.__cause__, IntegrityError):
                    raise
        raise StoreError("persona version: too many concurrent writers")

    async def update(self, state: PersonaState, source: str, reason: str) -> VersionInfo | None:
        """Commit ``state`` when it differs from the current one; None when it does not."""
        current = await self.current()
        if not state.differs_from(current.state):
            return None
        return await self.commit(state, source, reason)

    async def rollback(self, version: int) -> VersionInfo:
        target = await self.get(version)
        current = await self.current()
        return await self.commit(
            target.state, "rollback", f"rollback from v{current.version} to v{version}"
        )

    async def diff(self, a: int, b: int) -> list[str]:
        return diff_states((await self.get(a)).state, (await self.get(b)).state)

    # -- hard rules --------------------------------------------------------

    async def propose_rule(
        self, text: str, *, person_id: int | None = None, message_id: int | None = None
    ) -> RuleInfo:
        """Record a rule the person stated; the same open or confirmed rule is not repeated."""
        normalized = normalize_rule(text)
        if not normalized:
            raise InputError("a rule needs some text")
        async with self.store.session() as session:
            rows = (
                await session.scalars(
                    select(PersonaRule).where(
                        PersonaRule.status.in_((RuleStatus.PROPOSED, RuleStatus.CONFIRMED))
                    )
                )
            ).all()
            for row in rows:
                if row.text.lower() == normalized.lower():
                    return _rule_info(row)
            rule = PersonaRule(
                text=normalized,
                status=RuleStatus.PROPOSED,
                person_id=person_id,
                source_message_id=message_id,
                proposed_at=utcnow(),
            )
            session.add(rule)
            await session.flush()
            return _rule_info(rule)

    async def rules(self, status: RuleStatus | None = None) -> list[RuleInfo]:
        query = select(PersonaRule).order_by(PersonaRule.id)
        if status is not None:
            query = query.where(PersonaRule.status == status)
        async with self.store.session() as session:
            rows = (await session.scalars(query)).all()
        return [_rule_info(row) for row in rows]

    async def confirm_rule(self, rule_id: int) -> VersionInfo:
        """The person confirmed: the rule becomes hard in a new version."""
        rule = await self._decide(rule_id, RuleStatus.CONFIRMED)
        current = await self.current()
        version = await self.commit(
            current.state.with_rule(HardRule(rule.rule_id, rule.text)),
            "confirm",
            f"rule {rule.rule_id} confirmed: {rule.text}",
        )
        await self._set_decided_version(rule_id, version.version)
        return version

    async def reject_rule(self, rule_id: int) -> RuleInfo:
        """The person declined (or withdrew) a rule; a confirmed one leaves the state."""
        before = await self._get_rule(rule_id)
        rule = await self._decide(rule_id, RuleStatus.REJECTED)
        if before.status is RuleStatus.CONFIRMED:
            current = await self.current()
            version = await self.commit(
                current.state.without_rule(rule_id), "reject", f"rule {rule_id} withdrawn"
            )
            await self._set_decided_version(rule_id, version.version)
        return rule

    async def _get_rule(self, rule_id: int) -> RuleInfo:
        async with self.store.session() as session:
            row = await session.get(PersonaRule, rule_id)
        if row is None:
            raise InputError(f"rule {rule_id} does not exist", code="not_found")
        return _rule_info(row)

    async def _decide(self, rule_id: int, status: RuleStatus) -> RuleInfo:
        async with self.store.session() as session:
            row = await session.get(PersonaRule, rule_id)
            if row is None:
                raise InputError(f"rule {rule_id} does not exist", code="not_found")
            if row.status is status:
                raise InputError(f"rule {rule_id} is already {status.value}", code="conflict")
            row.status = status
            row.decided_at = utcnow()
            await session.flush()
            return _rule_info(row)

    async def _set_decided_version(self, rule_id: int, version: int) -> None:
        async with self.store.session() as session:
            row = await session.get(PersonaRule, rule_id)
            if row is not None:
                row.decided_version = version


def diff_states(a: PersonaState, b: PersonaState) -> list[str]:
    """Readable differences from ``a`` to ``b``, one line each."""
    lines: list[str] = []
    for name in TRAITS:
        before, after = a.traits.get(name), b.traits.get(name)
        if before is None and after is None:
            continue
        if before is None or after is None or abs(before - after) >= 0.001:
            lines.append(f"trait {name}: {_num(before)} -> {_num(after)}")
    for label, old, new in (
        ("voice marker", a.voice_markers, b.voice_markers),
        ("stance", a.stance, b.stance),
        ("formatting", a.formatting, b.formatting),
    ):
        old_w = {i.text: i.weight for i in old}
        new_w = {i.text: i.weight for i in new}
        for text in sorted(old_w.keys() - new_w.keys()):
            lines.append(f"- {label} {text!r} ({old_w[text]:.2f})")
        for text in sorted(new_w.keys() - old_w.keys()):
            lines.append(f"+ {label} {text!r} ({new_w[text]:.2f})")
        for text in sorted(old_w.keys() & new_w.keys()):
            if abs(old_w[text] - new_w[text]) >= 0.01:
                lines.append(f"~ {label} {text!r} {old_w[text]:.2f} -> {new_w[text]:.2f}")
    old_rules = {r.rule_id: r.text for r in a.hard_rules}
    new_rules = {r.rule_id: r.text for r in b.hard_rules}
    for rule_id in sorted(old_rules.keys() - new_rules.keys()):
        lines.append(f"- hard rule #{rule_id} {old_rules[rule_id]!r}")
    for rule_id in sorted(new_rules.keys() - old_rules.keys()):
        lines.append(f"+ hard rule #{rule_id} {new_rules[rule_id]!r}")
    return lines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
