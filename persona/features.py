"""Measurable features of a reply, and the six persona traits read from them.

Both the local judge and the persona track of the observer use these, so the
PersonaState and the SyncScore speak the same units. They are surface
features (counts of words, hedges, contractions, markers, formatting); what
they cannot see (irony, whether advice is good) is left to an LLM judge.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

TRAITS = ("directness", "formality", "verbosity", "humor", "warmth", "technical_depth")

# Curly apostrophes (U+2019) count as part of a word, as in "don\u2019t".
_WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019-]*|\d+(?:[.,]\d+)?")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s|$)|\n{2,}")
_CONTRACTION = re.compile(r"\b\w+(?:'|\u2019)(?:s|re|ve|ll|d|t|m)\b", re.IGNORECASE)
_EMOJI = re.compile(
    "[\U0001f300-\U0001faff\U00002600-\U000027bf\U0001f000-\U0001f2ff\U0001f900-\U0001f9ff]"
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+\S", re.MULTILINE)
_HEADER = re.compile(r"^\s{0,3}#{1,6}\s+\S", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")
_CODE_BLOCK = re.compile(r"```")
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_TECH_TOKEN = re.compile(r"\b(?:[a-z]+_[a-z_]+|[a-z]+[A-Z]\w+|\w+\(\)|--[a-z-]+|\w+\.\w{1,4})\b")


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_HEDGES = (
    "maybe",
    "perhaps",
    "possibly",
    "i think",
    "i guess",
    "it seems",
    "it might",
    "might be",
    "could be",
    "sort of",
    "kind of",
    "in some cases",
    "it depends",
    "generally speaking",
    "to some extent",
    "arguably",
)
_FORMAL = (
    "furthermore",
    "moreover",
    "therefore",
    "hence",
    "thus",
    "regarding",
    "kindly",
    "shall",
    "utilize",
    "additionally",
    "in conclusion",
    "it is important to note",
    "please be advised",
    "consequently",
    "nevertheless",
    "with respect to",
    "in accordance",
    "i would like to",
    "do not hesitate",
    "comprehensive",
    "facilitate",
    "endeavor",
)
_HUMOR = ("haha", "lol", "heh", ":)", ";)", "joke", "pun", "funny", "kidding", "ha!", "😄", "😂")
_WARM = (
    "glad",
    "sorry to hear",
    "that sounds",
    "hope",
    "take care",
    "you've got this",
    "proud of you",
    "happy for you",
    "i'm here",
    "makes sense",
    "understandable",
    "good luck",
    "well done",
    "nice",
    "thanks",
    "thank you",
)
_FLATTERY = (
    "great question",
    "excellent question",
    "what a wonderful",
    "what a great",
    "absolutely!",
    "fantastic question",
    "amazing question",
    "i'm thrilled",
    "i am thrilled",
    "brilliant idea",
    "you're so right",
    "certainly!",
    "of course!",
)
_ROBOTIC = (
    "as an ai",
    "as a language model",
    "i am unable to",
    "per your request",
    "i do not have personal",
    "your query",
    "the user",
    "dear user",
)
_TECH_WORDS = _word_set(
    """
    api sql json http https python async await function variable database index query
    server client cache thread process memory cpu gpu latency token model embedding
    vector compile runtime config schema migration regex docker kernel protocol socket
    algorithm parameter integer string boolean
    """
)


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def sentences(text: str) -> list[str]:
    parts = [p.strip() for p in _SENTENCE_END.split(text)]
    return [p for p in parts if p]


def _count_phrases(lowered: str, phrases: Iterable[str]) -> int:
    return sum(lowered.count(phrase) for phrase in phrases)


def _clamp(value: float) -> float:
    return max(0.0, min(1.0, value))


@dataclass(frozen=True)
class ReplyFeatures:
    """Counts measured on one text; ``traits`` turns them into 0-1 values."""

    words: int
    sentences: int
    contractions: int
    hedges: int
    formal: int
    humor: int
    warm: int
    flattery: int
    robotic: int
    second_person: int
    questions: int
    exclamations: int
    emojis: int
    bullets: int
    headers: int
    bold: int
    code_blocks: int
    inline_code: int
    tech_tokens: int

    @property
    def per_sentence(self) -> float:
        return 1.0 / max(1, self.sentences)

    def traits(self) -> dict[str, float]:
        n = self.per_sentence
        verbosity = 1 - math.exp(-self.words / 150)
        formality = _clamp(
            0.5
            + 0.15 * min(3, self.formal)
            - 0.35 * min(1.0, self.contractions * n)
            - 0.1 * min(1.0, (self.exclamations + self.emojis) * n)
        )
        directness = _clamp(
            0.85
            - 0.6 * min(1.0, self.hedges * n * 1.5)
            - 0.2 * min(1, self.flattery)
            - 0.15 * min(1.0, max(0, self.words - 120) / 200)
        )
        humor = _clamp(0.1 + 0.25 * self.humor + 0.1 * min(2, self.emojis))
        warmth = _clamp(
            0.3
            + 0.15 * min(3, self.warm)
            + 0.2 * min(1.0, self.second_person * n)
            - 0.25 * min(1, self.robotic)
        )
        technical = _clamp(
            0.1
            + 0.3 * min(1, self.code_blocks)
            + 0.1 * min(3, self.inline_code)
            + 6 * (self.tech_tokens / max(1, self.words))
        )
        return {
            "directness": directness,
            "formality": formality,
            "verbosity": verbosity,
            "humor": humor,
            "warmth": warmth,
            "technical_depth": technical,
        }

    def formatting(self) -> dict[str, float]:
        """Formatting habits shown by this text, as weights of 0-1."""
        habits: dict[str, float] = {}
        if self.bullets >= 2:
            habits["bullet lists"] = 1.0
        if self.headers:
            habits["headers"] = 1.0
        if self.bold:
            habits["bold text"] = 1.0
        if self.code_blocks:
            habits["code blocks"] = 1.0
        if self.emojis:
            habits["emojis"] = 1.0
        if not (self.bullets or self.headers or self.bold or self.code_blocks):
            habits["plain paragraphs"] = 1.0
        if self.words <= 80:
            habits["short replies"] = 1.0
        return habits

    def stance(self) -> dict[str, float]:
        """How the reply positions itself toward the person."""
        cues: dict[str, float] = {}
        if self.second_person and self.warm:
            cues["supportive"] = 1.0
        if self.questions:
            cues["curious: asks back"] = 1.0
        if self.flattery:
            cues["deferential"] = 1.0
        if self.robotic:
            cues["impersonal"] = 1.0
        if self.hedges == 0 and self.sentences <= 4:
            cues["straight talker"] = 1.0
        return cues


def measure(text: str) -> ReplyFeatures:
    lowered = text.lower()
    ws = words(text)
    return ReplyFeatures(
        words=len(ws),
        sentences=max(1, len(sentences(text))),
        contractions=len(_CONTRACTION.findall(text)),
        hedges=_count_phrases(lowered, _HEDGES),
        formal=_count_phrases(lowered, _FORMAL),
        humor=_count_phrases(lowered, _HUMOR),
        warm=_count_phrases(lowered, _WARM),
        flattery=_count_phrases(lowered, _FLATTERY),
        robotic=_count_phrases(lowered, _ROBOTIC),
        second_person=sum(1 for w in ws if w.lower() in ("you", "your", "you're", "yours")),
        questions=text.count("?"),
        exclamations=text.count("!"),
        emojis=len(_EMOJI.findall(text)),
        bullets=len(_BULLET.findall(text)),
        headers=len(_HEADER.findall(text)),
        bold=len(_BOLD.findall(text)),
        code_blocks=len(_CODE_BLOCK.findall(text)) // 2,
        inline_code=len(_INLINE_CODE.findall(text)),
        tech_tokens=len(_TECH_TOKEN.findall(text)) + sum(1 for w in ws if w.lower() in _TECH_WORDS),
    )


def mean_traits(texts: Sequence[str]) -> dict[str, float]:
    """The traits averaged over several texts (empty: an empty mapping)."""
    if not texts:
        return {}
    sums = dict.fromkeys(TRAITS, 0.0)
    for text in texts:
        for name, value in measure(text).traits().items():
            sums[name] += value
    return {name: total / len(texts) for name, total in sums.items()}


_NGRAM_STOP = _word_set(
    """
    a an the and or but so to of in on at for with is are was were be been it this that
    i you we they he she me my your our their its as if then than do does did not no yes
    have has had will would can could should just about from by up out
    """
)


def recurring_phrases(texts: Sequence[str], *, min_texts: int = 2, limit: int = 8) -> list[str]:
    """Two- and three-word phrases that recur across several texts (voice markers)."""
    seen: Counter[str] = Counter()
    for text in texts:
        tokens = [w.lower() for w in words(text)]
        grams: set[str] = set()
        for size in (2, 3):
            for start in range(len(tokens) - size + 1):
                window = tokens[start : start + size]
                content = [t for t in window if t not in _NGRAM_STOP]
                if len(content) >= size - 1 and content and not content[0].isdigit():
                    grams.add(" ".join(window))
        seen.update(grams)
    ranked = [(count, gram) for gram, count in seen.items() if count >= min_texts]
    ranked.sort(key=lambda item: (-item[0], -len(item[1]), item[1]))
    chosen: list[str] = []
    for _count, gram in ranked:
        if any(gram in longer or longer in gram for longer in chosen):
            continue
        chosen.append(gram)
        if len(chosen) == limit:
            break
    return chosen


def trait_distance(a: Mapping[str, float], b: Mapping[str, float], names: Iterable[str]) -> float:
    """Mean absolute difference over the named traits both have (0 when none)."""
    diffs = [abs(a[n] - b[n]) for n in names if n in a and n in b]
    return sum(diffs) / len(diffs) if diffs else 0.0
