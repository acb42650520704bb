"""The persona track of dual-track compaction (Agent Memory §5.2).

The observer condenses what the *person* said into observations; the same
pass reads the *agent's* own replies for its voice. Only replies the judge
found in voice teach the PersonaState, so a drifting model cannot drag the
state after it. Rules the person states ("never use emojis") are proposed
here and wait for their explicit confirmation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from persona.features import mean_traits, measure, recurring_phrases
from persona.state import PersonaSignal

_RULE_SENTENCE = re.compile(
    r"(?:^|(?<=[.!?]\s))\s*(?:please\s+)?(?:from now on,?\s+)?"
    r"((?:always|never|don't ever|do not ever|don't|do not|stop)\s+[^.!?\n]{3,120})",
    re.IGNORECASE,
)
# Words that show a "don't …" sentence is a standing instruction to the agent,
# not a one-off ("don't worry", "don't know").
_RULE_OBJECTS = re.compile(
    r"\b(?:emoji|emojis|bullet|bullets|list|lists|call me|say|use|using|answer|reply|replies|"
    r"respond|write|mention|exclamation|markdown|headers?|jargon|sentences|words|english|"
    r"formal|short|long|ask me|apologi[sz]e|sign off)\b",
    re.IGNORECASE,
)


def persona_signal(replies: Sequence[str]) -> PersonaSignal:
    """What the agent's in-voice replies show: mean traits and recurring habits."""
    if not replies:
        return PersonaSignal()
    formatting: dict[str, float] = {}
    stance: dict[str, float] = {}
    for reply in replies:
        features = measure(reply)
        for key, weight in features.formatting().items():
            formatting[key] = formatting.get(key, 0.0) + weight / len(replies)
        for key, weight in features.stance().items():
            stance[key] = stance.get(key, 0.0) + weight / len(replies)
    markers = {phrase: 1.0 for phrase in recurring_phrases(replies, min_texts=2, limit=4)}
    return PersonaSignal(
        traits=mean_traits(replies),
        voice_markers=markers,
        stance=stance,
        formatting=formatting,
        replies=len(replies),
    )


def stated_rules(text: str) -> list[str]:
    """Standing instructions to the agent in a person's message, as rule texts."""
    rules = []
    for match in _RULE_SENTENCE.finditer(text):
        sentence = match.group(1).strip()
        if sentence.lower().startswith(("always", "never")) or _RULE_OBJECTS.search(sentence):
            rules.append(sentence)
    return rules
