"""The broad-question part of ``agentgw bench locomo`` (issue 23).

For each conversation and speaker, "What has {speaker} been up to?" and "What
do you know about {speaker}?" are asked a day after the last session. A
session *in which the speaker had events* (LoCoMo's ``events_session_N``, read
only to know which sessions count, never fed to the store) is represented
when the pack holds the whole text of one of the speaker's turns of that
session, or a sentence of at least 8 words quoted verbatim from one (an
extractive node counts, a paraphrase does not). ``session coverage`` is the
mean over questions of the share of those sessions represented.

Coverage has no held-out set of its own: LoCoMo's development split (five
conversations) is all there is. So the figure is also reported by split —
``TUNED`` (the conversations the broad pack's rules may be looked at on) and the
rest, held out — and with ``HELD_OUT_QUESTIONS``, two phrasings the rules were
never written against.

At 1,000 tokens a LoCoMo speaker's 19-32 session days fit one line each, so the
tree's figure there is partly the budget's; the same questions are also asked
at half the budget (``broad_session_coverage_half_budget``), where one line per
day no longer fits and what the pack chooses decides the figure.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from memory.service import MemoryService, PackRequest

# (file, speaker a, speaker b, turns as (dia_id, speaker, text), person id, asked at)
Broad = tuple[Path, str, str, Sequence[tuple[str, str, str]], int, datetime]
QUESTIONS = ("What has {speaker} been up to?", "What do you know about {speaker}?")
HELD_OUT_QUESTIONS = ("Tell me about {speaker}'s life lately.", "Catch me up on {speaker}.")
TUNED = ("conv-26", "conv-30")
MIN_WORDS = 8
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_SESSION = re.compile(r"D(\d+):")


def event_sessions(path: Path, speaker: str) -> set[int]:
    """The sessions (present in the file) in which ``speaker`` had events."""
    data = json.loads(path.read_text(encoding="utf-8"))
    found = set()
    n = 1
    while f"session_{n}" in data:
        events = data.get(f"events_session_{n}") or {}
        if events.get(speaker):
            found.add(n)
        n += 1
    return found


def represented(
    pack: str, turns: Sequence[tuple[str, str, str]], speaker: str, session: int
) -> bool:
    """Whether ``pack`` quotes one of ``speaker``'s turns of ``session`` (whole, or a
    sentence of at least ``MIN_WORDS`` words)."""
    for dia_id, who, text in turns:
        match = _SESSION.match(dia_id)
        if who != speaker or match is None or int(match.group(1)) != session:
            continue
        if text in pack:
            return True
        for sentence in _SENTENCE.split(text):
            if len(sentence.split()) >= MIN_WORDS and sentence.strip() in pack:
                return True
    return False


async def coverage(
    service: MemoryService,
    conversations: Sequence[Broad],
    questions: Sequence[str] = QUESTIONS,
    budget_tokens: int | None = None,
) -> list[tuple[str, float]]:
    """Each broad question's session coverage, with its conversation's name (at the
    service's budget, or ``budget_tokens``)."""
    shares: list[tuple[str, float]] = []
    for path, speaker_a, speaker_b, turns, person_id, asked_at in conversations:
        for speaker in (speaker_a, speaker_b):
            sessions = event_sessions(path, speaker)
            if not sessions:
                continue
            for question in questions:
                pack = await service.build_pack(
                    PackRequest(
                        person_id,
                        question.format(speaker=speaker),
                        asked_at,
                        budget_tokens=budget_tokens,
                    )
                )
                hit = sum(represented(pack.text, turns, speaker, s) for s in sessions)
                shares.append((path.stem, hit / len(sessions)))
    return shares


def mean(shares: Sequence[tuple[str, float]], names: Sequence[str] | None = None) -> float:
    """The mean coverage over the questions (of the conversations ``names``, or all)."""
    picked = [share for name, share in shares if names is None or name in names]
    return round(statistics.fmean(picked), 4) if picked else 0.0


def by_split(shares: Sequence[tuple[str, float]]) -> dict[str, float]:
    held_out = sorted({name for name, _ in shares} - set(TUNED))
    return {"tuned": mean(shares, TUNED), "held_out": mean(shares, held_out)}
