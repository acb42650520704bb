"""A change of state said in any words ends the older statement of the same thing.

The slot, status and role rules (memory/slots.py, statuses.py, roles.py) and the
frames (memory/frames.py) read statements in the shapes they were written from;
people say a change in many more ("Finally settled in Ljubljana after the move",
"First week at Philips done", "Things fizzled out with Kwame", "Housewarming's
been bumped to the 28th"). This is the fallback when none of them ended anything,
no model: a newer statement with a *change cue* (a verb or marker of a change of
state, in a clause that is the speaker's own, present or just done, not a wish, a
visit or an addition) ends the speaker's older statements about the *same thing*:
the same kind of slot (``KINDS``: home, work, partner, pet, child, a favourite of
one thing, a plan by its event noun, a diet or a phone), or the thing the cue
acts on ("left Ozone", "quit the choir", "ditched Jira") named in the older one.

Pure functions; ``memory/validity.py`` finds the older statements and ends them.
Prefer a miss to a wrong ending (Graphiti #1728): every guard makes it say less.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memory.roles import NEEDS_MODIFIER, OCCUPATIONS
from memory.slot_grammar import wordset

# Cue verbs and phrases, each with the kind of slot it changes by itself ("" when
# the kind comes from the nouns around it: "switched", "quit").
_CUES: tuple[tuple[str, str], ...] = (
    # "moved out" of a home, not "moved out the old sofa"; "settled in Ljubljana", not
    # "settled in to the new routine".
    (r"moved\s+(?:into|house|(?:out|back|away|in)(?!\s+(?:the|a|an|my|our|some|all)\b))", "home"),
    (r"relocat\w+|settled\s+in\s+(?-i:[A-Z])\w*", "home"),
    (r"moving\s+day|new\s+(?:place|flat|house|apartment|home)|keys\s+to", "home"),
    (r"first\s+(?:day|week|month)\s+(?:at|with)\s+(?-i:[A-Z])\w*", "work"),
    (r"took\s+the\s+job\s+(?:at|with)", "work"),
    (r"signed\s+with\s+(?-i:[A-Z])\w*", "work"),  # an employer, not "a new agent"
    (r"got\s+the\s+[\w\s-]{0,30}?\b(?:job|role|position)(?!\s+of)", "work"),
    (r"qualified(?!\s+(?:for|to)\b)", "work"),
    (r"started\s+(?:at|with)\s+(?-i:[A-Z])\w*|last\s+day\s+at|handed\s+in\s+my\s+notice", "work"),
    (r"broke\s+up|split\s+up|fizzled\s+out|divorce\w*|single\s+again", "partner"),
    (r"we\s+called\s+(?:her|him)|goes\s+by|renamed|final\s+answer|in\s+the\s+end", "name"),
    (r"(?:we\s+)?named\s+(?:her|him|it|them)|changed\s+(?:his|her|their)\s+name", "name"),
    (r"bumped|postponed|rescheduled|rebooked|pushed\s+(?:back|to)|brought\s+forward", "plan"),
    (r"called\s+off|now\s+on\s+the\s+\d+\w*", "plan"),
    (r"new\s+date|cancell?ed|moved\s+to\s+the\s+\d", "plan"),
    (
        r"moved\s+(?:over\s+)?to|left|quit|ditched|dropped|gave\s+up(?:\s+on)?|switched(?:\s+\w+)?\s+to",
        "",
    ),
    (r"swapped|replaced|overtaken|rehome[d]?|went\s+back\s+to|no\s+longer|anymore", ""),
)
_CUE = re.compile(
    r"\b(?:" + "|".join(f"(?P<c{i}>{p})" for i, (p, _) in enumerate(_CUES)) + r")\b", re.I
)
# Markers that say a state is new, only with a kind's noun in the same clause: chat
# is full of "now" and "finally".
_MARKER = re.compile(
    r"\b(?:now|these\s+days|at\s+last|finally|new\s+(?:favou?rite|number\s+one))\b", re.I
)

# The kinds of slot and the nouns that say a statement is about one. A favourite and a
# plan are kinds per thing: ``fav:film``, ``plan:wedding``.
KINDS: dict[str, str] = {
    "home": r"(?i:(?:i|we)\s+live|living\s+in|live\s+in|flat|apartment|studio|rent|"
    r"renting|based\s+in|home\s+is|"
    r"home's|mum\s+and\s+dad's|parents')|(?i:i'm|we're)\s+in\s+[A-Z]\w*",
    "work": r"(?i:job|employer|firm|hired|i\s+work\s+(?:at|for|as|in))|"
    r"(?i:i'm)\s+at\s+[A-Z]\w*|"
    r"(?i:i\s+do\s+\w+\s+at)",
    "partner": r"(?i:girlfriend|boyfriend|wife|husband|partner|fianc\w+|dating|married|"
    r"divorce\w*|broke\s+up)",
    "pet": r"(?i:pet|dog|puppy|cat|kitten|rabbit|lab|hamster|budgie|parrot|tortoise)",
    "child": r"(?i:baby|son|daughter|eldest|youngest|kids?|child|twins)",
    "diet": r"(?i:diet|keto|vegan|vegetarian|pescatarian|paleo|carbs)",
    "phone": r"(?i:phone|iphone|pixel|oneplus|fairphone|galaxy)",
}
# Case counts only where a pattern says so ("I'm at Siemens": a name after "at").
_KIND_RE = {k: re.compile(rf"\b(?:{p})\b") for k, p in KINDS.items()}
_TITLES = OCCUPATIONS - NEEDS_MODIFIER
# A title is the speaker's own when one of these says so shortly before it.
_AS_ONE = re.compile(r"\b(?:i'm|i\s+am|i've\s+been|been|as|work-wise)\b")
# Kinds a change reaches only by naming or parting ("we called her Aoife", "we had to
# rehome Bramble"): chat is full of "my kids" and "the dog" said with "finally".
_NAMED_ONLY = frozenset({"pet", "child"})
_FAVOURITE = re.compile(r"\b(?:favou?rite|number\s+one|all-time|fan|obsessed|allegiance)\b", re.I)
_FAVOURITE_OF = re.compile(
    r"\b(?:food|film|movie|band|team|book|song|show|album|artist|drink|game|club)\b", re.I
)
_EVENTS = (
    "housewarming|wedding|party|test|exam|flight|flying|trip|holiday|conference|"
    "interview|appointment|surgery|operation|gig|concert|graduation|ceremony|birthday|"
    "meeting|check-up|dinner|match|race|marathon"
)
_EVENT = re.compile(rf"\b(?:{_EVENTS})\b", re.I)
_EVENT_SAME = {"flying": "flight"}

# Guards, read in the cue's clause.
_CLAUSE_SPLIT = re.compile(r"[.!?;:]+\s*|,\s+(?:but|so|and)\s+|,\s+(?=(?:i|we)\b)|\s+-\s+", re.I)
_FIRST = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|we|we're|we've|our|us)\b", re.I)
_RELATIONS = (
    "brother|sister|husband|wife|mum|mom|dad|father|mother|son|daughter|friend|mate|"
    "best\\s+mate|neighbou?r|boss|colleague|cousin|uncle|aunt|gran|grandma|grandad|"
    "parents|flatmates?|roommates?|girlfriend|boyfriend|partner|kids?|neighbou?rs|landlord|"
    "family"
)
# Someone else is who changed: "my brother just moved", "he quit", "Ross and his
# girlfriend broke up", "my neighbour's new puppy".
_OTHER = re.compile(
    rf"\b(?:my|our|the)\s+(?:\w+\s+)?(?:{_RELATIONS})(?:'s)?\b|\b(?:he|she|his|her)\b"
    r"|\b[A-Z]\w+\s+and\s+(?:his|her)\b",
    re.I,
)
_PAST = re.compile(r"\b(?:back\s+when|used\s+to|years\s+ago|when\s+i\s+was)\b", re.I)
_WISH = re.compile(
    r"\b(?:if|might|maybe|could|would|i'd|thinking\s+(?:about|of)|considering|"
    r"consider|offer|hoping|hope|want\s+to|plan\s+to|planning)\b",
    re.I,
)
# A plan said before the cue ("I'm going to move to Berlin"), not after ("the OnePlus
# is going to my mum").
_STILL = re.compile(r"\bstill\b", re.I)
_GOING = re.compile(r"\b(?:going\s+to|gonna)\b", re.I)
_ADDED = re.compile(
    r"\b(?:too|also|as\s+well|taken\s+up|took\s+up|on\s+the\s+side|alongside)\b", re.I
)
_VISIT = re.compile(
    r"\b(?:staying\s+(?:at|with)|visiting|for\s+(?:a|one|two|three|four|\d+)\s+"
    r"(?:days?|nights?|weeks?)|holiday|trip)\b",
    re.I,
)
_WORD = re.compile(r"[A-Za-z][\w'-]+")


# Capitalised words that name no thing of the person's: a month said with a change
# ("we broke up in July") is no reason to end what else was said in July.
_NOT_NAMES = wordset(
    "i i'm i've i'd i'll monday tuesday wednesday thursday friday saturday sunday "
    "january february march april may june july august september october november "
    "december christmas easter"
)
# Their short forms ("last Fri"), which a value is not either.
_SHORT_DAYS = wordset("mon tue tues wed thu thur thurs fri sat sun jan feb mar apr jun jul aug")
_SHORT_MONTHS = wordset("sep sept oct nov dec")


@dataclass(frozen=True)
class Change:
    """What a newer statement says changed: the kinds of slot, and the things the cue
    acts on or names (lower case)."""

    kinds: frozenset[str]
    things: frozenset[str]


def kinds_of(text: str) -> frozenset[str]:
    """The kinds of slot a statement is about, by its nouns."""
    found = {kind for kind, pattern in _KIND_RE.items() if pattern.search(text)}
    # A job said by its title, in the speaker's words ("I'm a line cook at Dishoom"):
    # the occupations memory/roles.py reads, not those that need a word before them.
    lower = text.lower()
    for m in _WORD.finditer(lower):
        if m.group(0) in _TITLES and _AS_ONE.search(lower[max(0, m.start() - 40) : m.start()]):
            found.add("work")
            break
    if _FAVOURITE.search(text):
        of = {m.group(0).lower() for m in _FAVOURITE_OF.finditer(text)}
        found |= {f"fav:{o.replace('movie', 'film')}" for o in of} or {"fav:"}
    for m in _EVENT.finditer(text):
        word = m.group(0).lower()
        found.add(f"plan:{_EVENT_SAME.get(word, word)}")
    return frozenset(found)


def _names(text: str, *, start: bool = True) -> set[str]:
    """Names: runs of capitalised words ("Google Docs" is not "Google"), lower case;
    not one opening a sentence unless ``start`` is False (a clause after a cue)."""
    skip = r"(?<![.!?]\s)(?<!^)" if start else ""
    out = set()
    for m in re.finditer(skip + r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*", text):
        out.add(m.group(0).lower().removesuffix("'s"))
    return out - _NOT_NAMES


def _clauses(text: str) -> list[str]:
    """The clauses of a text; a question's keep their "?"."""
    out = []
    for sentence in re.findall(r"[^.!?;:]+[.!?;:]*", text.replace("\u2019", "'")):
        asked = "?" if sentence.rstrip().endswith("?") else ""
        out += [c + asked for c in _CLAUSE_SPLIT.split(sentence) if c.strip()]
    return out


def change_of(text: str) -> Change | None:
    """The change a statement says, or None: a cue in a clause of the speaker's own
    (a first-person word, or none and no one else), not a question, not the past, a
    wish, an addition or a visit."""
    kinds: set[str] = set()
    things: set[str] = set()
    for clause in _clauses(text):
        if "?" in clause:
            continue
        cue = _CUE.search(clause)
        marker = _MARKER.search(clause) if cue is None else None
        if cue is None and marker is None:
            continue
        at = (cue or marker).start()  # type: ignore[union-attr]
        before = clause[:at]
        if _OTHER.search(before) or _GOING.search(before):
            continue
        if _PAST.search(clause) or _WISH.search(clause) or _ADDED.search(clause):
            continue
        if _VISIT.search(clause):
            continue
        own: set[str] = set(kinds_of(clause))
        if cue is not None:
            kind = next(_CUES[int(k[1:])][1] for k, v in cue.groupdict().items() if v)
            after = [w.lower() for w in _WORD.findall(clause[cue.end() :])[:3]]
            if not kind:
                # "switched to X", "quit X": what changed is the cue's object, not
                # whatever else the clause names ("moved to a four-day week at work").
                own = set(kinds_of(" ".join([cue.group(0), *after]))) | {
                    k for k in own if k.startswith("fav:")
                }
                if len(after) > 1 and after[0] == "the":
                    things.add(after[1])  # "quit the choir", "left the band"
            elif kind not in ("name", "plan"):
                own |= {kind}
            if kind != "name" and "rehome" not in cue.group(0).lower():
                own -= _NAMED_ONLY
        else:
            # "now", "finally" alone say nothing of what changed ("I finally took my
            # kids to a pottery workshop"); with a favourite they say it is a new one.
            own = {k for k in own if k.startswith("fav:")}
            if not own:
                continue
        if _STILL.search(clause):
            continue  # "still my favourite now": the same said again
        kinds |= own
        # Names right after the cue: what it changed ("fizzled out with Kwame", "left
        # Ozone"); not a greeting's before it ("Thanks, Mel! I finally ..."), nor one
        # further on ("swapped the tyres on the Golf").
        end = (cue or marker).end()  # type: ignore[union-attr]
        rest = clause[end:].split()
        # A naming names both ("In the end we called her Aoife, Isla just didn't suit").
        naming = cue is not None and kind == "name"
        things |= _names(" ".join(rest if naming else rest[:4]), start=False)
    if not kinds and not things:
        return None
    return Change(frozenset(kinds), frozenset(things))


_OTHER_FIRST = re.compile(
    rf"\s*(?:(?:my|our)\s+(?:\w+\s+)?(?:{_RELATIONS})\b(?!\s+and\s+i\b)|he\b|she\b)", re.I
)


def ends(change: Change, older: str) -> bool:
    """Whether ``change`` ends the older statement: in one of its clauses that is the
    speaker's own state (not a wish, the past, or someone else's — except the
    partner or child the change is about), the same kind of slot (a favourite of the
    same thing, a plan of the same event), or a thing the cue acts on or names."""
    for clause in _clauses(older):
        if "?" in clause or _WISH.search(clause) or _PAST.search(clause):
            continue
        other = _OTHER_FIRST.match(clause)
        if other and not kinds_of(other.group(0)) & change.kinds & {"partner", "child"}:
            continue
        if _same_thing(change, clause):
            return True
    return False


def _same_thing(change: Change, older: str) -> bool:
    theirs = kinds_of(older)
    if any(kind != "fav:" for kind in change.kinds & theirs):
        return True
    favourites = [k for k in theirs if k.startswith("fav:")]
    if favourites and (
        "fav:" in change.kinds
        or ("fav:" in theirs and any(k.startswith("fav:") for k in change.kinds))
    ):
        return True
    if "home" in theirs and "home" not in change.kinds:
        return False  # "we left Paris after a lovely week" is no move from it
    words = {w.lower().removesuffix("'s") for w in _WORD.findall(older)}
    named = _names(older, start=False)
    # A named thing matches a name of the older ("left Ozone" / "a barista at Ozone");
    # a lower-case one a word ("quit the choir" / "the community choir").
    return bool(change.things & (named | {w for w in words if w.islower()}))


# Values of one kind a statement names: runs of capitalised words not opening a
# sentence ("Darwin", "Access Bank"), and figures ("6 November": "6").
_VALUE = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*|\b\d[\d:/.,-]*\b")
# The past told as a memory ("when I worked at Lloyds"), a stay said by its length ("in
# Johannesburg for the week"), the future: no present state of the speaker's.
_THEN = re.compile(
    r"\bwhen\s+(?:i|we)\s+\w+ed\b|\bfor\s+the\s+(?:week|weekend|day|night|month)\b"
    r"|\b(?:i'll|we'll|will|shall)\b",  # the future: "so I'll be up and down the A11"
    re.I,
)


# A name the speaker addresses, not a value: "Thanks, Melanie!", "Hey Mel!", "Yeah Mel,
# stoked", "Welcome to the world, Beatrix!" — a sentence's first or second word, or
# after a comma, followed by a stop or a comma ("Left Google!" is lost with them: a
# missed conflict, never a false one).
_VOCATIVE = re.compile(r"(?:^(?:\S+\s+)?|,\s*)[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*(?=\s*[!?,.]|\s*$)")


def value_kind(value: str) -> str:
    """A figure ("6", "16:8") or a name."""
    return "figure" if value[:1].isdigit() else "name"


def own_values(text: str) -> frozenset[str]:
    """The names and figures a statement says of the speaker's own present state (lower
    case): in clauses that are no question, wish, past, visit or addition, not opened
    by someone else ("my sister lives in ..."), and with no one else named before the
    value ("my sister's just moved to Cambridge")."""
    out: set[str] = set()
    sentences = re.findall(r"[^.!?]+[.!?]*", text.replace("\u2019", "'"))
    text = " ".join(_VOCATIVE.sub(" ", s.strip(), count=1) for s in sentences)
    for clause in (c.strip() for c in _clauses(text)):
        if "?" in clause or _OTHER_FIRST.match(clause):
            continue
        if any(p.search(clause) for p in (_PAST, _THEN, _WISH, _VISIT, _ADDED)):
            continue
        for m in _VALUE.finditer(clause):
            value = m.group(0).lower().strip(".,").removesuffix("'s")
            before = clause[: m.start()]
            if {value, value.removesuffix("s")} & (_NOT_NAMES | _SHORT_DAYS | _SHORT_MONTHS):
                continue  # "on Saturdays", "last Fri"
            if _OTHER.search(before) or _GOING.search(before):
                continue
            out.add(value)
    return frozenset(out)
