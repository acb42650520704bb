"""Hard rules the local judge can check on a reply, read from their wording.

A rule is free text the person confirmed ("Never use emojis", "Don't call me
buddy", "Keep answers under 50 words"). The shapes below cover the rules
people state most; a rule of any other shape is reported as unchecked, never
as kept or broken.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from persona.features import measure, sentences, words

_NEGATIVE = r"(?:never|no|don't|do not|dont|stop|avoid|without|not)"
_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "twenty": 20,
    "fifty": 50,
    "hundred": 100,
}

Check = Callable[[str], bool]


@dataclass(frozen=True)
class RuleOutcome:
    rule: str
    # None: the rule's shape is not one the local judge can check.
    kept: bool | None


def _negated(rule: str, noun: str) -> bool:
    return re.search(rf"\b{_NEGATIVE}\b[^.]*\b{noun}", rule) is not None


def _limit(rule: str, unit: str) -> int | None:
    match = re.search(
        rf"\b(?:under|less than|fewer than|at most|no more than|max(?:imum)?(?: of)?|within)\s+"
        rf"(\d+|{'|'.join(_NUMBER_WORDS)})\s+{unit}",
        rule,
    )
    if match is None:
        return None
    value = match.group(1)
    return int(value) if value.isdigit() else _NUMBER_WORDS[value]


def compile_rule(text: str) -> Check | None:
    """A check that says whether a reply keeps the rule, or None when it cannot tell."""
    rule = text.lower().replace("\u2019", "'")
    if "emoji" in rule and _negated(rule, "emoji"):
        return lambda reply: measure(reply).emojis == 0
    if re.search(r"bullet|list", rule) and _negated(rule, r"(?:bullet|list)"):
        return lambda reply: measure(reply).bullets == 0
    if "exclamation" in rule and _negated(rule, "exclamation"):
        return lambda reply: "!" not in reply
    if re.search(r"header|heading", rule) and _negated(rule, "head"):
        return lambda reply: measure(reply).headers == 0
    if "code block" in rule and _negated(rule, "code"):
        return lambda reply: measure(reply).code_blocks == 0
    if "markdown" in rule and _negated(rule, "markdown"):

        def no_markdown(reply: str) -> bool:
            f = measure(reply)
            return f.bullets + f.headers + f.bold + f.code_blocks == 0

        return no_markdown
    word_limit = _limit(rule, "words")
    if word_limit is not None:
        return lambda reply: len(words(reply)) <= word_limit
    sentence_limit = _limit(rule, "sentences")
    if sentence_limit is not None:
        return lambda reply: len(sentences(reply)) <= sentence_limit
    call = re.search(
        r"\b(?:never|don't|do not|stop)\b[^.]*?\bcall(?:ing)? me\s+['\"]?([\w' ]+?)['\"]?$", rule
    )
    if call:
        name = call.group(1).strip()
        return lambda reply: re.search(rf"\b{re.escape(name)}\b", reply.lower()) is None
    say = re.search(
        r"\b(?:never|don't|do not|stop|avoid)\b\s+(?:say|saying|use|using|writ(?:e|ing))"
        r"(?: the (?:word|phrase))?\s+['\"]([^'\"]+)['\"]",
        rule,
    )
    if say:
        phrase = say.group(1).strip()
        return lambda reply: phrase not in reply.lower()
    if re.search(r"\balways\b.*\b(?:end|finish)\b.*\bquestion", rule):
        return lambda reply: reply.rstrip().endswith("?")
    if re.search(r"\b(?:keep it|be|stay|answer)\s+(?:short|brief|concise)", rule):
        return lambda reply: len(words(reply)) <= 120
    return None


def check_rules(rules: Sequence[str], reply: str) -> list[RuleOutcome]:
    outcomes = []
    for rule in rules:
        check = compile_rule(rule)
        outcomes.append(RuleOutcome(rule, None if check is None else check(reply)))
    return outcomes


def constraint_score(outcomes: Sequence[RuleOutcome]) -> float:
    """Share of the checkable rules kept; 1.0 when no rule can be checked."""
    checked = [o for o in outcomes if o.kept is not None]
    if not checked:
        return 1.0
    return sum(1 for o in checked if o.kept) / len(checked)
