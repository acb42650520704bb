"""Slots: what a statement claims about its speaker, found by rules without a model.

A slot is a subject and an attribute: where Ada lives (``ada:residence``),
where she works, her dog's name, her favourite film, the date of her
wedding. A claim fills a slot with a value ("porto"), or ends it ("we broke
up" ends ``partner``), and may name the value it replaces ("I moved from
Lisbon to Porto": old ``lisbon``). ``memory/validity.py`` uses the claims to
end older statements of the same slot; the trust pass (``memory/trust.py``)
uses them to tag conflicts.

The rules read first-person statements only ("I", "we", "my", "our"): a
question ("Do you live in Lisbon?"), a statement about someone else, or
reported speech makes no claim. They are deliberately narrow: a missed claim
leaves both statements current (the trust pass still orders them by date),
a wrong one would end an unrelated fact, the failure peers shipped
(Graphiti #1728).
"""

from __future__ import annotations

import re
from datetime import datetime

from memory.roles import NOT_EMPLOYERS, told_as_history
from memory.slot_grammar import (
    ADV,
    BE,
    HAVE,
    OLD,
    SPEAKER,
    VALUE,
    Claim,
    normal,
    speaker_guessed,
    value_of,
)
from memory.statuses import status_claims
from memory.timeparse import resolve_window

__all__ = ["Claim", "claims", "normal"]


_VALUE, _OLD, _I, _ADV, _HAVE, _BE = VALUE, OLD, SPEAKER, ADV, HAVE, BE

_PETS = r"dog|cat|puppy|kitten|pet|hamster|rabbit|bunny|parrot|horse|turtle|fish|bird|snake"
_PARTNERS = r"girlfriend|boyfriend|partner|wife|husband|fianc[ée]e?|spouse|significant other|gf|bf"
_CHILDREN = r"son|daughter|baby|kid|child|newborn"
_PLANS = (
    r"wedding|interview|appointment|flight|party|trip|exam|surgery|operation|meeting|move|"
    r"presentation|concert|vacation|holiday|ceremony|graduation|deadline|launch|date|"
    r"birthday party|reunion|race|marathon|game|match|recital|show|visit|check-?up|"
    r"court date|hearing|defen[cs]e|shift|class|lesson|dinner|lunch|trial"
)

# (attribute, pattern) in order; the first that matches a sentence's clause wins for that
# attribute. ``{pet}``-style attributes take the matched noun.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (attribute, re.compile(pattern, re.I))
    for attribute, pattern in (
        # where they live
        (
            "residence",
            rf"\b{_I}{_HAVE}{_ADV}(?:moved|relocated)(?:\s+(?:back|house|out|over))?"
            rf"(?:\s+from\s+{_OLD})?\s+(?:to|into)\s+(?:a\s+new\s+(?:place|flat|apartment|house)\s+in\s+)?"
            rf"{_VALUE}",
        ),
        # "I live in Leeds", "I live with my parents in Croydon".
        (
            "residence",
            rf"\b{_I}\s+{_ADV}live\s+(?:with\s+(?:my|our)\s+[\w' ]{{1,30}}?\s+)?in\s+{_VALUE}",
        ),
        # A home of one's own: "I finally got my own flat in Brixton".
        (
            "residence",
            rf"\b{_I}{_HAVE}{_ADV}(?:got|bought|found|rented|moved\s+into)\s+(?:my|our|a)\s+"
            rf"(?:(?:own|first|new)\s+)*(?:flat|place|house|apartment|home|condo|studio)\s+in\s+{_VALUE}",
        ),
        ("residence", rf"\b{_I}{_BE}\s+{_ADV}(?:living|based|settled)\s+in\s+{_VALUE}"),
        (
            "residence",
            rf"\b(?:my|our)\s+(?:new\s+)?(?:home|address)\s+is\s+(?:now\s+)?(?:in\s+)?{_VALUE}",
        ),
        # where they work
        (
            "employer",
            rf"\b{_I}{_HAVE}{_ADV}(?:started|began)\s+(?:a\s+new\s+job\s+|working\s+|work\s+)?at\s+{_VALUE}",
        ),
        ("employer", rf"\b{_I}\s+{_ADV}work\s+(?:at|for)\s+{_VALUE}"),
        ("employer", rf"\b{_I}{_BE}\s+{_ADV}working\s+(?:at|for)\s+{_VALUE}"),
        # "joined" names an employer only with a proper name ("I joined Acme", "I've
        # joined the ESB"; not "a club"; "the Ramblers Club" is no employer either).
        ("employer", rf"\b{_I}{_HAVE}{_ADV}joined\s+(?:the\s+)?(?-i:(?=[A-Z])){_VALUE}"),
        (
            "employer",
            rf"\b{_I}{_HAVE}{_ADV}(?:got|took|accepted|landed)\s+(?:a|an|the)\s+(?:new\s+)?"
            rf"(?:job|position|role|offer)\s+(?:at|with)\s+{_VALUE}",
        ),
        ("employer", rf"\b{_I}{_HAVE}{_ADV}(?:got\s+)?hired\s+(?:at|by)\s+{_VALUE}"),
        # Their own business: "I opened an online clothing store", "we started our own firm".
        (
            "employer",
            rf"\b{_I}{_HAVE}{_ADV}(?:opened|started|launched|founded|set\s+up)\s+"
            r"(?:(?:my|our)\s+own|a|an)\s+(?:new\s+)?(?P<value>(?:[\w'-]+\s+){0,3}?"
            r"(?:store|shop|business|company|startup|start-up|bakery|restaurant|cafe|studio|"
            r"practice|firm|agency|salon|clinic))\b",
        ),
        # job title
        # "I work as a TITLE" and the other shapes of a role: memory/roles.py, by the
        # head noun of the title ("I work as a volunteer" is no job).
        ("job_title", rf"\b{_I}{_HAVE}{_ADV}(?:got\s+)?promoted\s+to\s+{_VALUE}"),
        ("job_title", rf"\bmy\s+(?:new\s+)?(?:job\s+)?title\s+is\s+(?:now\s+)?{_VALUE}"),
        # names of those close to them
        (
            "{noun}_name",
            rf"\b(?:my|our)\s+(?:new\s+)?(?P<noun>{_PETS}|{_CHILDREN})(?:'s|s)?\s+name\s+is\s+"
            rf"(?:now\s+)?{_VALUE}",
        ),
        (
            "{noun}_name",
            rf"\b(?:my|our)\s+(?:new\s+)?(?P<noun>{_PETS}|{_CHILDREN})\s+is\s+(?:called|named)\s+{_VALUE}",
        ),
        (
            "{noun}_name",
            rf"\b{_I}{_HAVE}{_ADV}named\s+(?:my|our|the)\s+(?:new\s+)?(?P<noun>{_PETS}|{_CHILDREN})\s+{_VALUE}",
        ),
        ("partner", rf"\bmy\s+(?:new\s+)?(?:{_PARTNERS})(?:'s\s+name)?\s+is\s+(?:now\s+)?{_VALUE}"),
        ("partner", rf"\b{_I}{_BE}\s+{_ADV}(?:dating|seeing|engaged\s+to|married\s+to)\s+{_VALUE}"),
        ("partner", rf"\b{_I}{_HAVE}{_ADV}(?:married|started\s+dating)\s+{_VALUE}"),
        # favourites
        (
            "favourite_{noun}",
            rf"\bmy\s+(?:new\s+)?(?:all[- ]time\s+)?fav(?:ou?)rite\s+(?P<noun>\w+(?:\s+\w+)?)\s+"
            rf"(?:is|has\s+become)\s+(?:now\s+)?{_VALUE}",
        ),
    )
)

# "I switched (from A) to B": the slot comes from the old value's claim, or from the
# kind of thing switched (a small lexicon), else no claim (too vague to end anything).
_SWITCH = re.compile(
    rf"\b{_I}{_HAVE}{_ADV}(?:switched|changed|moved\s+over|swapped|converted)"
    rf"(?:\s+(?:my\s+)?(?P<kind>\w+))??(?:\s+from\s+{_OLD})?\s+(?:to|for)\s+{_VALUE}",
    re.I,
)
_KINDS = {
    "phone": "phone",
    "iphone": "phone",
    "android": "phone",
    "diet": "diet",
    "vegan": "diet",
    "vegetarian": "diet",
    "keto": "diet",
    "car": "car",
    "bank": "bank",
    "gym": "gym",
    "editor": "editor",
    "vim": "editor",
    "emacs": "editor",
    "laptop": "computer",
    "mac": "computer",
    "linux": "os",
    "windows": "os",
    "coffee": "drink",
    "tea": "drink",
    "decaf": "drink",
    "school": "school",
    "team": "team",
    "major": "major",
    "provider": "provider",
    "plan": "plan",
}

# Ending a slot without a new value.
_NO_LONGER = re.compile(
    rf"\b{_I}\s+(?:no\s+longer|don't|do\s+not|can't|cannot)\s+(?P<verb>live\s+in|work\s+(?:at|for)|"
    rf"work\s+as\s+(?:a|an)|have\s+(?:a|an|my)|own\s+(?:a|an)|date|see)\s+{_VALUE}",
    re.I,
)
_NO_LONGER_BE = re.compile(
    rf"\b{_I}{_BE}\s+no\s+longer\s+(?:(?:a|an)\s+|(?:at|with|in|working\s+(?:at|for)|"
    rf"living\s+in|dating|seeing)\s+)?{_VALUE}",
    re.I,
)
_ENDS_VERB = {
    "live in": "residence",
    "work at": "employer",
    "work for": "employer",
    "work as a": "job_title",
    "work as an": "job_title",
    "date": "partner",
    "see": "partner",
}
_LEFT_JOB = re.compile(
    rf"\b{_I}{_HAVE}{_ADV}(?:quit|left|resigned\s+from|lost\s+my\s+job\s+at|"
    rf"got\s+(?:fired|laid\s+off)\s+from)\s+"
    rf"(?:my\s+(?:job|position|role)\s+at\s+)?{_VALUE}",
    re.I,
)
_BROKE_UP = re.compile(
    rf"\b{_I}{_HAVE}{_ADV}(?:broke\s+up|split\s+up|separated|got\s+divorced|divorced|"
    rf"called\s+(?:it|the\s+engagement)\s+off)\b",
    re.I,
)
# "my X is now Y" and "X is now Y" for the person's own things.
_IS_NOW = re.compile(
    rf"\b(?:my|our)\s+(?P<noun>[a-z]+(?:\s+[a-z]+)?)\s+is\s+now\s+{_VALUE}",
    re.I,
)
_NOUN_ATTRIBUTE = {
    "address": "residence",
    "home": "residence",
    "employer": "employer",
    "job": "employer",
    "company": "employer",
    "job title": "job_title",
    "title": "job_title",
    "role": "job_title",
    "position": "job_title",
}
# A plan's date: "the wedding is on June 5", "my interview got moved to Friday".
_PLAN_DATE = re.compile(
    rf"\b(?:my|our|the)\s+(?P<noun>{_PLANS})\s+(?:is|was|has\s+been|got|'s)\s+"
    r"(?:now\s+|officially\s+|finally\s+)?(?:(?:moved|rescheduled|pushed(?:\s+back)?|postponed|"
    r"brought\s+forward|changed|set|scheduled|planned|booked)\s+)?(?:to|for|on)?\s*"
    r"(?P<rest>.{3,60})",
    re.I,
)
# One slot whatever the spelling ("favourite colour" and "favorite color").
_SPELLING = {"colour": "color", "flavour": "flavor", "favourite": "favorite"}
# Clauses end at sentence ends and commas: "Leo for now, we might change it" is two
# clauses, and the "might" of the second does not undo the first.
_CLAUSE = re.compile(r"(?<=[.!?;])\s+|\n+|,\s+(?:(?:but|and|so)\s+)?")
# Casual chat drops the subject: "Just accepted an offer at Globex", "Moved to Porto".
_SUBJECTLESS = re.compile(
    r"^(?:(?:just|finally|recently|also|officially)\s+)?(?=(?:moved|relocated|started|began|"
    r"joined|accepted|got|took|landed|quit|left|switched|lost|resigned|named|graduated|"
    r"retired|finished|sold|stopped|went|qualified|became)\b)",
    re.I,
)
# A role or employer said as one more ("also", "too", "on the side", "at weekends")
# ends no other: a second job adds to the first ("I'm a nurse" and "I'm a DJ at
# weekends" are both true). "I also teach yoga on weekends" is a frame of "teach"
# (memory/frames.py), which ends no title either.
_ADDITIVE = re.compile(
    r"\b(?:also|too|as\s+well|on\s+the\s+side|side\s+(?:job|gig|hustle)|second\s+job|"
    r"(?:at|on|over\s+the)\s+weekends?|weekends|alongside|"
    r"in\s+addition|moonlight(?:ing)?|in\s+my\s+(?:spare|free)\s+time)\b",
    re.I,
)
_JOB_SLOTS = frozenset(("employer", "job_title"))
# A role said as a pastime, anywhere in the message ("I'm a painter, mostly
# watercolours, just for fun"): no job.
_PASTIME = re.compile(
    r"\b(?:for\s+fun|as\s+a\s+hobby|just\s+a\s+hobby|for\s+the\s+love\s+of\s+it)\b", re.I
)
# A move said with no word of a home ("I moved to X"): X may be a tool ("I've moved to
# Chrome"), a schedule ("we moved to a four-day week") or a place.
_HOME_MOVE = re.compile(
    r"relocated|moved\s+(?:back|house|out|away)|\binto\b|new\s+(?:place|flat|apartment|house)",
    re.I,
)
# A question makes no claim.
_QUESTION = re.compile(r"\?\s*$")
_REPORTED = re.compile(
    r"\b(?:if|whether|maybe|might|would|could|should|wish|hope|want|plan)\b", re.I
)


def _clauses(text: str) -> list[str]:
    return [c.strip() for c in _CLAUSE.split(text) if c.strip()]


# The clause split, for the statement frames (memory/frames.py).
clauses_of = _clauses


_value = value_of


def claims(text: str, at: datetime | None = None) -> list[Claim]:
    """The claims a statement makes about its speaker, in the order of its clauses;
    at most one per attribute (the last said wins: "I moved to X, then to Y")."""
    found: dict[str, Claim] = {}
    pastime = bool(_PASTIME.search(text))
    # Phones type a curly apostrophe (U+2019) for "I'm".
    for told in _clauses(text.replace("\u2019", "'")):
        if _QUESTION.search(told):
            continue
        said = speaker_guessed(told)  # "Guess who's head chef now!"
        clause = "I " + said if _SUBJECTLESS.match(said) else said
        conditional = bool(_REPORTED.search(clause))
        read = _clause_claims(clause, at)
        # Statuses and life events (memory/statuses.py); a wish or a worry ("I'm
        # hoping to get promoted", "I might get laid off") is none.
        if not conditional:
            read += status_claims(clause, at)
        additive = bool(_ADDITIVE.search(clause))
        # "I joined Acme as an intern back in 2015": a job of the past (memory/roles.py).
        history = any(c.attribute in _JOB_SLOTS for c in read) and told_as_history(clause, at)
        for claim in read:
            # "If I moved to Berlin ..." or "I might switch to tea" claims nothing.
            if conditional and not claim.ends:
                continue
            # "I'm also a yoga instructor", "I also work at the bar": a second job.
            if (
                (additive or history or pastime)
                and claim.attribute in _JOB_SLOTS
                and not claim.ends
            ):
                continue
            if (
                claim.attribute == "employer"
                and claim.value.split()[-1:]
                and (claim.value.split()[-1] in NOT_EMPLOYERS)
            ):
                continue  # "I joined the Ramblers Club"
            found[f"gone:{claim.old}" if claim.gone else claim.attribute] = claim
    return list(found.values())


def _clause_claims(clause: str, at: datetime | None) -> list[Claim]:
    out: list[Claim] = []
    if _BROKE_UP.search(clause):
        out.append(Claim("partner", "", ends=True))
    for match in (_NO_LONGER.search(clause), _NO_LONGER_BE.search(clause)):
        if match is None:
            continue
        verb = " ".join((match.groupdict().get("verb") or "").lower().split())
        attribute = _ENDS_VERB.get(verb, "")
        out.append(Claim(attribute, "", old=_value(match), ends=True))
    left = _LEFT_JOB.search(clause)
    # "I quit smoking" is a habit given up (memory/frames.py), not a job.
    if left is not None and _value(left) and not _value(left).split()[0].endswith("ing"):
        out.append(Claim("employer", "", old=_value(left), ends=True))
    for attribute, pattern in _RULES:
        match = pattern.search(clause)
        if match is None:
            continue
        value = _value(match)
        if not value:
            continue
        noun = (match.groupdict().get("noun") or "").lower()
        noun = {"puppy": "dog", "kitten": "cat", "bunny": "rabbit", "kid": "child"}.get(noun, noun)
        noun = " ".join(_SPELLING.get(w, w) for w in noun.split())
        name = attribute.replace("{noun}", "_".join(noun.split()))
        bare = match.re is _RULES[0][1] and not _HOME_MOVE.search(match.group(0))
        out.append(Claim(name, value, old=_value(match, "old"), needs_place=bare))
    switch = _SWITCH.search(clause)
    if switch is not None and _value(switch):
        kind = (switch.group("kind") or "").lower()
        new, old = _value(switch), _value(switch, "old")
        category = next((_KINDS[w] for w in (kind, *new.split(), *old.split()) if w in _KINDS), "")
        # Without a kind of thing, only a named old value says which slot it is.
        if category or old:
            out.append(Claim(f"uses_{category}" if category else "", new, old=old))
    is_now = _IS_NOW.search(clause)
    if is_now is not None and _value(is_now) and not is_now.group("noun").lower().startswith("fav"):
        noun = " ".join(is_now.group("noun").lower().split())
        attribute = _NOUN_ATTRIBUTE.get(noun, "_".join(noun.split()))
        out.append(Claim(attribute, _value(is_now)))
    plan = _PLAN_DATE.search(clause)
    if plan is not None and at is not None:
        window = resolve_window(plan.group("rest"), at)
        if window is not None:
            noun = "_".join(plan.group("noun").lower().split())
            out.append(Claim(f"date_{noun}", window.start.isoformat()))
    return out


# How a person who gave no name is named: as the speaker of their episodes, and by
# the observer ("The person: I live in Lisbon"). Both are the person's own slots.
PERSON_SPEAKER = "Person"
UNNAMED_PERSON = "The person"


def subject_of(speaker: str, role: str) -> str:
    """Whose slot: the speaker's first name, lower case; the person's own when unnamed."""
    if speaker.strip() in (PERSON_SPEAKER, UNNAMED_PERSON):
        speaker = ""
    name = speaker.strip().split()[0].lower() if speaker.strip() else ""
    return name or ("agent" if role == "assistant" else "user")


def split_quoted(text: str) -> tuple[str, str]:
    """("Ada", "I moved to Porto") from an observation quoted as "Ada: I moved to Porto"."""
    head, sep, body = text.partition(": ")
    if sep and 0 < len(head) <= 40 and "\n" not in head:
        return head, body
    return "", text
