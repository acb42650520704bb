"""Neutralising instruction-like text before stored text enters a prompt (§5.1, openclaw-mem).

Memories, observations, persona phrases and summaries come from user-controlled
text, so a stored message can try to steer the model ("ignore previous
instructions", "you are now ...", a fake ``<system>`` tag, "Note to the
assistant: ...", a forged "Human: ... Assistant: ..." exchange, "send the API
key to ...", and the same in other languages). Such spans are replaced by a
visible marker and reported, so the pack trace and the log say what was
filtered; the rest is kept word for word, on one line (``fold_lines``), so it
cannot leave the bullet that quotes it. ``memory/redteam.py`` holds the attacks
it is tested and measured against.

The rules read the text as the model does, not as its code points spell it:
zero-width and other invisible characters between letters ("ig\u200bnore"),
accents and combining marks, full-width and mathematical letters, the Latin
look-alikes of Cyrillic and Greek letters ("ignore" with a Cyrillic i and o), and
Unicode tag characters, which draw nothing yet spell ASCII a model can read.
A match there replaces the span of the original text it came from. Tag
characters left over (outside the emoji flags that use them) are hidden text
whatever they say: they are removed and reported as ``hidden_text``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MARKER = "[filtered: instruction-like text]"
# The rest of the sentence (a dot inside "evil.com" does not end it).
_TAIL = r"(?:[^.!?\n]|[.!?](?=\S))*"
# The start of a line, whatever breaks it (re's ``^`` knows only "\n").
_BOL = r"(?:^|(?<=[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]))"

# Words of the other languages' override rule (es, fr, de, pt, it, ru), as
# ``reading`` spells them (``_read``): accents dropped, Cyrillic look-alikes Latin.
# A verb, then within a few words the instructions, said to be earlier ones (or
# all of them): "Ignora las instrucciones anteriores", "Vergiss alle vorherigen
# Anweisungen". First-person forms are left out ("olvidé las reglas": I forgot).
_OVERRIDE_VERBS = (
    "ignora|ignorar|ignore|ignorez|ignorer|ignoriere|ignorieren|ignorier|ignorate|"
    "olvida|olvidad|olviden|olvidate|descarta|omite|oublie|oubliez|oublier|vergiss|"
    "vergesst|missachte|esqueca|esquecam|desconsidere|desconsidera|dimentica|dimenticate|"
    "trascura|игнорируй|проигнорируй|забудь|забудьте|не обращай внимания на"
)
_OVERRIDE_WHICH = (
    "anteriores|previas|previos|precedentes|anterieures|prealables|ci-dessus|vorherigen|"
    "bisherigen|vorigen|obigen|vorangegangenen|fruheren|alten|anteriori|precedenti|todas|"
    "todos|toutes|tous|alle|tutte|tutti|все|предыдущие|прежние|прошлые|вышеуказанные"
)
_OVERRIDE_NOUNS = (
    "instrucciones|indicaciones|reglas|ordenes|consignes|regles|directives|anweisungen|"
    "instruktionen|regeln|vorgaben|befehle|instrucoes|regras|ordens|istruzioni|regole|"
    "indicazioni|инструкции|инструкций|указания|указаний|правила|правил|команды"
)
# "\u3002\uff01\uff1f": the full-width full stop, exclamation and question marks.
_ZH_END = "[^\u3002\uff01\uff1f\n]"
_ZH = (
    "(?:忽略|无视|忽视|不要理会|不理会|忘记|忘掉)"
    + _ZH_END
    + "{0,12}(?:之前|以上|先前|上面|前面|所有|全部)"
    + _ZH_END
    + "{0,8}(?:指令|指示|说明|规则|提示|要求)"
    + _ZH_END
    + "*"
)

_ROLE_ELSEWHERE = (
    r"a\s+partir\s+de\s+ahora,?\s+(?:eres|seras|responde|contesta|siempre|nunca)|ahora\s+eres|"
    r"(?:tu\s+es|vous\s+etes)\s+maintenant|"
    r"(?:a\s+partir\s+de\s+maintenant|desormais|dorenavant),?\s+(?:tu|vous|reponds|repondez)\b|"
    r"du\s+bist\s+(?:jetzt|nun|ab\s+sofort)|"
    r"(?:ab\s+jetzt|ab\s+sofort|von\s+nun\s+an),?\s+(?:bist\s+du|antworte|sprich|schreibe?)\b|"
    r"a\s+partir\s+de\s+agora,?\s+(?:voce|responda|seja|sempre)|agora\s+voce\s+e\b|"
    r"d'ora\s+in\s+(?:poi|avanti),?\s+(?:sei|rispondi|scrivi)|ora\s+sei\s+(?:un|una)\b"
)


def _read(words: str) -> str:
    """An alternation of words as ``reading`` spells them (see ``_READ_AS``, below)."""
    return "|".join(reading(w).replace(" ", r"\s+") for w in words.split("|"))


@dataclass(frozen=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    # Lower-case words (as ``reading`` spells them, blanks as one space) one of which
    # every match of ``pattern`` contains: without any of them, the rule is not run.
    needed: tuple[str, ...]


def _rules() -> tuple[_Rule, ...]:
    return (
        _Rule(
            "override",
            re.compile(
                r"\b(?:ignore|disregard|forget|override|bypass|discard|abandon)\s+"
                r"(?:all\s+|any\s+|the\s+|your\s+|of\s+)*"
                r"(?:previous|prior|above|earlier|preceding|system|original|former|old)?\s*"
                r"(?:instructions?|prompts?|rules?|guidelines?|guidance|directives?|orders|"
                r"commands|programming|constraints)\b" + _TAIL + r"|"
                r"\b(?:ignore|disregard|forget)\s+(?:all\s+|everything\s+)+(?:above|before|"
                r"previous(?:ly)?|prior|earlier|you\s+(?:were|have\s+been)\s+told)\b" + _TAIL,
                re.IGNORECASE,
            ),
            ("ignore", "disregard", "forget", "override", "bypass", "discard", "abandon"),
        ),
        _Rule(
            # The same in es, fr, de, pt, it, ru and zh (a rule of its own only to be
            # run on its own words; it reports as "override").
            "override",
            re.compile(
                rf"(?<!\w)(?:{_read(_OVERRIDE_VERBS)})(?:\s+\S+){{0,3}}?\s+"
                rf"(?:(?:{_read(_OVERRIDE_WHICH)})(?:\s+\S+){{0,2}}?\s+(?:{_read(_OVERRIDE_NOUNS)})"
                rf"|(?:{_read(_OVERRIDE_NOUNS)})(?:\s+\S+){{0,2}}?\s+(?:{_read(_OVERRIDE_WHICH)}))"
                r"(?!\w)" + _TAIL + "|" + _ZH,
                re.IGNORECASE,
            ),
            (
                *("ignor", "olvid", "descart", "omite", "oubli", "vergiss", "vergesst"),
                *("missacht", "esquec", "desconsider", "dimentic", "trascur"),
                *(reading(w) for w in ("игнор", "забуд", "обращай")),
                *("忽略", "无视", "忽视", "理会", "忘记", "忘掉"),
            ),
        ),
        _Rule(
            "role_change",
            re.compile(
                # Not "where you are now." or "you are now in Rome": a place, not a role.
                r"\b(?:(?<!where\s)(?<!how\s)you\s+are\s+now(?!\s*(?:[.!?,;:]|$|"
                r"(?:in|at|on|with|home|here|there|back|able|free|ready|done|a\s+parent)\b))|from\s+now\s+on,?\s+you\s+(?:are|will|must)|"
                r"pretend\s+(?:to\s+be|you\s+are)|act\s+as\s+(?:if\s+you\s+(?:are|were)\s+)?"
                r"(?:an?\s+)?(?:unrestricted|jailbroken|different|new|evil|dan)\b|"
                r"enter\s+(?:developer|dan|god)\s+mode)" + _TAIL,
                re.IGNORECASE,
            ),
            ("you are now", "now on", "pretend", "act as", "mode"),
        ),
        _Rule(
            "role_change",
            re.compile(r"\b(?:" + _ROLE_ELSEWHERE + ")" + _TAIL, re.IGNORECASE),
            (
                *("ahora", "maintenant", "desormais", "dorenavant", "du bist", "jetzt"),
                *("sofort", "nun an", "agora", "in poi", "in avanti", "ora sei"),
            ),
        ),
        _Rule(
            # Orders meant to outlast the message: "from now on end every reply with ...".
            # What a person asks for as a person goes through the lessons the owner sees
            # and edits (persona rules), not through memory text the model obeys.
            "standing_order",
            re.compile(
                r"\b(?:from\s+now\s+on|going\s+forward|henceforth|in\s+(?:all\s+)?future\s+"
                r"(?:replies|answers|responses|messages)),?\s+(?:please\s+)?(?:you\b|your\b|"
                r"always\b|never\b|only\b|(?:reply|respond|answer|end|start|begin|say|write|"
                r"include|add|append|use|sign|speak|call|refer|address|stop|don't|do\s+not|"
                r"make|put|mention|recommend|tell)\b)" + _TAIL,
                re.IGNORECASE,
            ),
            ("now on", "going forward", "henceforth", "future"),
        ),
        _Rule(
            # Text that speaks to the model over the person's head: "Note to the
            # assistant: ...", "IMPORTANT NEW INSTRUCTIONS FOR THE AI: ...". All of it
            # after the address is the attacker's: it is claimed to the end.
            "addressed",
            re.compile(
                r"\b(?:(?:important|urgent|new|updated|secret|hidden)\s+)*(?:notes?|messages?|"
                r"reminders?|instructions?|directives?|orders|attention|warning)\s+(?:to|for)\s+"
                r"(?:the\s+|all\s+|any\s+|this\s+)?(?:assistants?|ai|a\.i\.|models?|bots?|"
                r"llms?|language\s+models?|chatbots?|agents?|systems?)\b(?s:.*)|"
                r"\b(?:new|updated|revised|additional|important|urgent|secret|hidden)\s+"
                r"(?:system\s+)?(?:instructions?|directives?)\s*:(?s:.*)",
                re.IGNORECASE,
            ),
            ("note", "message", "reminder", "instruc", "directive", "order", "attention", "warn"),
        ),
        _Rule(
            "fake_tag",
            re.compile(
                r"</?\s*(?:system|assistant|user|instructions?|memory_pack|im_start|im_end)\b"
                r"[^>]*>|"
                r"<\|[^|>]{1,40}\|>|\[/?(?:INST|SYS|SYSTEM)\]|" + _BOL + r"\s*#{1,6}\s*(?:system|"
                r"instructions?|response)\b.*$|#{1,6}\s*(?:system|instructions?|response)\s*:"
                + _TAIL
                + "|"
                + _BOL
                + r"\s*(?:system|developer)\s*:",
                re.IGNORECASE | re.MULTILINE,
            ),
            ("<", "[", "#", "system", "developer"),
        ),
        _Rule(
            # A forged exchange ("Human: ... Assistant: ..."): from the first forged
            # turn to the end, everything is the forger's.
            "turn_forgery",
            re.compile(
                r"\b(?:human|assistant)\s*:(?s:.*)|"
                + _BOL
                + r"\s*(?:user|ai|model|bot):(?s:.*)|(?<=[.!?]\s)(?:user|ai|model|bot):(?s:.*)",
                re.IGNORECASE | re.MULTILINE,
            ),
            ("human", "assistant", "user:", "ai:", "model:", "bot:"),
        ),
        _Rule(
            "exfiltration",
            re.compile(
                r"\b(?:reveal|print|show|repeat|output|leak|send|post|upload|email|forward|"
                r"exfiltrate)\s+(?:me\s+|us\s+)?(?:your|the|all|this|our)\s+(?:system\s+prompt|"
                r"instructions|api[\s_-]?keys?|secrets?|passwords?|credentials|tokens?|"
                r"(?:conversation|chat)\s+(?:history|log)|transcript|memories)\b" + _TAIL + r"|"
                r"\b(?:send|post|upload|forward|email|leak)\b[^.!?\n]{0,80}\bto\s+https?://\S+"
                + _TAIL,
                re.IGNORECASE,
            ),
            (
                *("prompt", "instructions", "api", "secret", "password", "credential", "token"),
                *("conversation", "chat", "transcript", "memories", "http"),
            ),
        ),
    )


@dataclass(frozen=True)
class Sanitized:
    text: str
    # Names of the rules that fired, in order, one entry per neutralised span.
    rules: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.rules)


# Latin look-alikes a model reads as the Latin letter: Cyrillic and Greek (those
# NFKD leaves alone), and the dotless i, which ``re`` takes for i when it ignores case.
_LOOK_ALIKES = dict(
    zip(
        "аеорсухіјѕԁԛԝвкмнтАВЕКМНОРСТХІЈЅαβεικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧı",
        "aeopcyxijsdqwbkmhtABEKMHOPCTXIJSabeikvoptuxABEZHIKMNOPTYXi",
        strict=True,
    )
)
_TAG_FIRST, _TAG_LAST = 0xE0000, 0xE007F


def _dropped_when_read() -> dict[int, None]:
    """Code points that change nothing a reader sees: format characters (zero-width
    spaces and joiners, bidi marks) and combining marks (accents once NFKD splits
    them off, variation selectors)."""
    dropped = dict.fromkeys(
        code for code in range(0x10000) if unicodedata.category(chr(code)) in ("Cf", "Mn", "Me")
    )
    dropped.update(dict.fromkeys(range(0xE0100, 0xE01F0)))  # variation selectors 17-256
    return dropped


# Tag characters 0xE0020-0xE007E spell the ASCII 0x20 apart; the rest of their block
# (the language tag, the cancel tag) draws and spells nothing.
_READ_AS: dict[int, str | None] = {
    **_dropped_when_read(),
    **{ord(k): v for k, v in _LOOK_ALIKES.items()},
    **{code: chr(code - _TAG_FIRST) for code in range(_TAG_FIRST + 0x20, _TAG_LAST)},
    _TAG_FIRST: None,
    _TAG_FIRST + 1: None,
    _TAG_LAST: None,
}
# Emoji subdivision flags (Scotland, Wales, ...) are the black flag, up to six tag
# letters or digits and the cancel tag: the one use of tag characters kept as is.
_HIDDEN = re.compile(
    "(\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{1,6}\U000e007f)"
    "|[\U000e0000-\U000e007f]+"
)


def reading(text: str) -> str:
    """``text`` as a reader takes it: compatibility forms unfolded, invisible and
    combining characters dropped, look-alikes as Latin, tag characters as their ASCII."""
    return unicodedata.normalize("NFKD", text).translate(_READ_AS)


_RULES = _rules()

# Words and marks without one of which no rule can match (every rule's ``needed``).
# Most memories hold none, and looking for plain substrings costs far less than
# the rules (a pack sanitises ~70 candidates); a text that holds some runs only
# the rules they belong to. A regex alternation of them was slower than the rules.
_NEEDED: tuple[str, ...] = tuple(dict.fromkeys(w for rule in _RULES for w in rule.needed))


def _any_of(words: Sequence[str]) -> re.Pattern[str]:
    """A pattern finding any of ``words``, as a trie ("ig(?:nor)...") so that each
    position of a text costs one branch per letter, not one try per word: about twice
    as fast as looking for each word in turn, or as a flat alternation (LoCoMo turns)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def pattern(node: dict[str, Any]) -> str:
        if "" in node:
            return ""  # a shorter word already matches
        branches = [re.escape(char) + pattern(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return re.compile(pattern(trie))


# Most stored texts are ASCII: the words of the Cyrillic and Chinese rules cannot
# be in them.
_ANY_NEEDED = _any_of(_NEEDED)
_ANY_NEEDED_ASCII = _any_of([word for word in _NEEDED if word.isascii()])


def _reading_with_origins(text: str) -> tuple[str, Sequence[int]]:
    """``reading(text)``, and for each of its characters the index in ``text`` of the
    character it came from."""
    read: list[str] = []
    origins: list[int] = []
    for index, char in enumerate(text):
        for part in reading(char):
            read.append(part)
            origins.append(index)
    return "".join(read), origins


def sanitize(text: str) -> Sanitized:
    """``text`` as it may enter a prompt: instruction-like spans replaced by ``MARKER``
    (which rules fired is reported), and on one line (``fold_lines``).

    The one function for every stored text a prompt quotes: memory items, the
    pack's notes, observations, persona state, summaries of earlier turns.
    """
    if text.isascii():
        # Blanks as one space, as the words with spaces in them are spelled.
        lowered = " ".join(text.lower().split())
        if _ANY_NEEDED_ASCII.search(lowered):
            return _one_line(_apply_rules(text, text, _rules_for(lowered)))
        return _one_line(Sanitized(text))
    # Folding takes a few microseconds in C: only what it lets through goes further.
    read = reading(text)
    lowered = " ".join(read.lower().split())
    if _ANY_NEEDED.search(lowered) or _HIDDEN.search(text):
        return _one_line(_apply_rules(text, read, _rules_for(lowered)))
    return _one_line(Sanitized(text))


# Each rule with a pattern finding any of its needed words: one search in C where a
# loop over the words cost ~40 substring tests in Python a text (a pack checks ~40).
_RULE_WORDS = tuple((rule, _any_of(rule.needed) if rule.needed else None) for rule in _RULES)


def _rules_for(lowered: str) -> tuple[_Rule, ...]:
    """The rules whose words ``lowered`` holds (the others cannot match it)."""
    return tuple(rule for rule, words in _RULE_WORDS if words is not None and words.search(lowered))


def apply_rules(text: str) -> Sanitized:
    """Every rule over ``text``, without the quick check (``sanitize`` is the one to call)."""
    return _one_line(_apply_rules(text, text if text.isascii() else reading(text), _RULES))


# Whatever starts a new line for a reader or a model (CR, LF, VT, FF, the file,
# group and record separators, NEL, the Unicode line and paragraph separators),
# with the blanks around it; and the other control characters, which draw nothing.
_LINE_BREAK = re.compile(r"[ \t]*[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]\s*")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x1f\x7f]")
_ONE_LINE_CHECK = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
LINE_JOIN = " / "


def fold_lines(text: str) -> str:
    """``text`` on one line: line breaks become " / ", other control characters go.

    A stored text is quoted inside one bullet of a prompt; a line break of its own
    would let what follows stand on a line of its own, outside the bullet (a fake
    header, a fake turn, a fake end of the block).
    """
    if _ONE_LINE_CHECK.search(text) is None:
        return text
    # Breaks at either end only end the text: dropped, not shown as " / ".
    return _CONTROL.sub("", _LINE_BREAK.sub(LINE_JOIN, text.strip()))


def _one_line(result: Sanitized) -> Sanitized:
    folded = fold_lines(result.text)
    return result if folded is result.text else Sanitized(folded, result.rules)


def _apply_rules(text: str, read: str, rules: Sequence[_Rule]) -> Sanitized:
    """``rules`` over ``text``, given ``reading(text)`` (folded once, by the caller)."""
    if text.isascii():
        origins: Sequence[int] = range(len(text))
    else:
        # Mapping each character back costs ~1 µs a character, in Python: only for a
        # text some rule matches once folded whole (in C), or that hides tag characters.
        if not any(rule.pattern.search(read) for rule in rules) and not _HIDDEN.search(text):
            return Sanitized(text)
        read, origins = _reading_with_origins(text)
    # Spans of ``read`` each rule claims, in rule order. A later rule reads a claimed
    # span as one opaque character run (as it read the marker when the rules
    # replaced in turn), so it can match across it but never claims it alone.
    claimed: list[tuple[int, int, str]] = []
    masked = read
    for rule in rules:
        found = [
            (m.start(), m.end(), rule.name)
            for m in rule.pattern.finditer(masked)
            if m.end() > m.start() and not _inside(claimed, m.start(), m.end())
        ]
        for start, end, _ in found:
            masked = masked[:start] + "\x00" * (end - start) + masked[end:]
        claimed.extend(found)
    fired = [name for _, _, name in claimed]
    # To the original text's spans; one marker where claimed spans overlap.
    spans = sorted((origins[start], origins[end - 1] + 1) for start, end, _ in claimed)
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces, at = [], 0
    for start, end in merged:
        pieces.append(text[at:start])
        pieces.append(MARKER)
        at = end
    pieces.append(text[at:])
    cleaned = "".join(pieces)
    if not cleaned.isascii():

        def unhide(match: re.Match[str]) -> str:
            if match.group(1):
                return match.group(1)
            fired.append("hidden_text")
            return ""

        cleaned = _HIDDEN.sub(unhide, cleaned)
    return Sanitized(cleaned, tuple(fired))


def _inside(claimed: list[tuple[int, int, str]], start: int, end: int) -> bool:
    """Whether [start, end) lies within one span already claimed."""
    return any(s <= start and end <= e for s, e, _ in claimed)
