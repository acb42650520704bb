"""Statement frames: a subject-verb-object reading of first-person states (issue 22).

The slot rules of memory/slots.py read the common slots (where one lives, works,
a pet's name ...). Most changes people report are in other words: "I use Vim
for everything" then "I switched from Vim to Emacs", "I drive a Civic" then "I
drive a Tesla now", "My doctor is Dr. Okafor" then "My new doctor is Dr.
Lindqvist". A frame reads such a statement as

    verb (its stem, with "to"/"with" when the verb takes one) + object + scope

where the scope is the content words of the phrases that qualify it ("at
work", "for notebooks", "on my laptop"), time words left out. Only states
are read: the simple present ("I use", "I drive"), the present progressive
("I'm learning"), "I've had", and "my X is Y". A past tense ("I went"), a
modal, a verb of thinking or feeling, or a liking ("I love hiking": likings
add up rather than replace each other) is no frame.

memory/validity.py ends an older frame of the same subject and verb by a newer
one only when the newer says it changed (``CHANGE``: "now", "these days",
"instead", "new", "switched" ...), names another object, and the two scopes
do not exclude each other ("I speak Portuguese at home" and "I speak English
at work now" are both true). "I no longer drink coffee" / "I don't run
anymore" end the frames of that verb (and that object, when named), and so do
the events that say a state ended: a habit given up ("I quit smoking", "I
stopped going to the gym") and a thing no longer had ("I sold the Golf": the
frames of having, owning, driving or riding an object with all its words).
"I have a X" is a frame only for a named possession ("a 2015 Golf", "a cat
called Miso"), and possessions never replace each other by a change cue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer

from memory.slots import clauses_of, normal

_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=4096)
def stem(word: str) -> str:
    return str(_STEMMER.stemWord(word.lower()))


@dataclass(frozen=True)
class Frame:
    # The verb's stem, with its preposition ("use", "go to"), or "my <noun>".
    key: str
    # Normalised ("2012 honda civic"); "" when the verb has none ("I don't run anymore").
    object: str
    # Stems of the qualifying phrases' content words ("work", "notebook").
    scope: frozenset[str]
    # The clause says it changed: "now", "instead", "switched", "my new ...".
    change: bool
    # "no longer", "don't ... (anymore)": the state ended.
    negated: bool
    # An amount of something ("a lot of sci-fi", "more vegetables"): it adds to what
    # was said, it does not replace it.
    partitive: bool = False
    # Ends only a frame whose object holds every word of this one ("I sold my spare
    # tickets" does not end "I have a season ticket"; "I sold the Golf" ends "I have a
    # 2015 Golf").
    strict: bool = False


# What says a state changed. "since" is left out: "I've been with them since uni" is
# how long a state has held, not a change.
CHANGE = re.compile(
    r"\b(?:now|nowadays|these\s+days|anymore|any\s+more|instead|no\s+longer|switched|"
    r"changed|swapped|moved\s+(?:on|over|to)|from\s+now\s+on|gave\s+up|stopped|quit|"
    r"not\s+any\s+longer)\b",
    re.I,
)

_AUX_BE = r"'m|\s+am|'re|\s+are"
_AUX_HAVE = r"'ve|\s+have"
_ADVERBS = (
    r"still|also|usually|mostly|mainly|now|currently|really|actually|just|only|always|"
    r"normally|generally|basically|honestly|definitely|even|these\s+days|nowadays|already|"
    r"both|all|last|finally|totally|kinda|sometimes|often|rarely|seriously|literally|"
    r"probably|sure|def|too|so"
)
_CLAUSE_FRAME = re.compile(
    rf"\b(?:i|we)(?P<aux>{_AUX_BE}|{_AUX_HAVE})?\s+(?:(?:{_ADVERBS})\s+)*"
    r"(?P<neg>(?:no\s+longer|don't|do\s+not|never|not)\s+)?(?P<verb>[a-z]+)\b(?P<rest>[^.!?;]*)",
    re.I,
)
_POSSESSIVE = re.compile(
    r"\b(?:my|our)\s+(?P<new>new\s+)?(?P<noun>[a-z]+)\s+(?:is|are)\s+(?:now\s+)?"
    r"(?P<rest>[^.!?;]*)",
    re.I,
)


def _wordset(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Verbs whose simple present is no lasting state, or states that add up rather than
# replace each other (likings, knowing, wanting).
_NOT_STATES = _wordset(
    "am are is was were be been being do does did don't have has had will would can "
    "could should might must shall may think thought feel felt guess hope want need "
    "know knew mean meant wish wonder believe suppose remember forget agree bet promise "
    "understand see saw hear heard love like enjoy hate adore miss get got just really "
    "also still totally can't cannot won't wouldn't couldn't didn't gotta gonna wanna "
    "say said tell told ask asked let appreciate admire recommend imagine try tried "
    "am'nt went came made took gave found left lost met began became kept brought sent "
    "paid sold won chose ate drank drove ran swam sang spoke wrote bought taught caught "
    "flew fell grew sat stood slept spent put cut hit set quit keep stay feel try make "
    "turn start begin look hang head push focus chase finish plan prep prepare gear step "
    "wrap guess reckon"
)
# Progressives that say how one is doing or what one is about to do, not a state one
# holds: "I'm staying positive", "I'm getting ready", "I'm starting a studio".
_NOT_PROGRESSIVE = frozenset(
    stem(w)
    for w in _wordset(
        "staying keeping getting feeling turning starting beginning trying going coming "
        "looking making doing putting stepping living wrapping thinking planning hoping "
        "preparing prepping gearing taking having loving enjoying hanging heading pushing "
        "focusing chasing finishing working"
    )
)
# Prepositions a verb takes before its object ("go to", "bank with", "work on").
_PARTICLES = ("to", "with", "on", "at", "for", "in")
_BREAK = _wordset(
    "and but because since so for with after before when while at on in from to of "
    "as which who where until though although if about like than that now today "
    "these this every each all day days again anymore instead too either"
)
_PREPOSITIONS = _wordset("at for on in with to from by near during")
# Time words are no scope: "on Mondays", "every morning", "at the moment".
_TIME = _wordset(
    "moment morning mornings evening evenings night nights day days daily week weeks "
    "weekly weekend weekends month months year years time times monday mondays tuesday "
    "tuesdays wednesday wednesdays thursday thursdays friday fridays saturday saturdays "
    "sunday sundays now today tonight lately recently ago the a an my our every each "
    "some most all this that these those"
)


_HONORIFIC = re.compile(r"\b(Dr|Mr|Mrs|Ms|Mx|Prof|St)\.\s", re.I)
_ARTICLES = frozenset(("a", "an", "the"))
# Titles name no one: "Dr. Okafor" and "Dr. Lindqvist" are different objects.
_TITLES = frozenset(("dr", "mr", "mrs", "ms", "mx", "prof", "st", "sir", "miss"))


def _words(text: str) -> list[str]:
    return re.findall(r"[\w'&-]+", text.lower())


_PARTITIVE = re.compile(
    r"^\s*(?:a\s+lot\s+of|lots\s+of|loads\s+of|plenty\s+of|a\s+bit\s+of|a\s+little|"
    r"more|less|fewer|some|a\s+few|a\s+couple\s+of)\b",
    re.I,
)


def _object_and_scope(rest: str) -> tuple[str, frozenset[str]]:
    rest = _PARTITIVE.sub("", rest)
    words = _words(rest)
    taken: list[str] = []
    n = 0
    while n < len(words) and len(taken) < 5 and words[n] not in _BREAK:
        taken.append(words[n])
        n += 1
    while taken and taken[-1] in _ARTICLES:  # "three coffees a (day)"
        taken.pop()
    scope: set[str] = set()
    in_phrase = False
    for word in words[n:]:
        if word in _PREPOSITIONS:
            in_phrase = True
        elif word in _BREAK and word not in _PREPOSITIONS:
            in_phrase = False
        elif in_phrase and word not in _TIME:
            scope.add(stem(word))
    return normal(" ".join(taken)), frozenset(scope)


def _clause_frame(clause: str) -> Frame | None:
    change = bool(CHANGE.search(clause))
    possessive = _POSSESSIVE.search(clause)
    match = _CLAUSE_FRAME.search(clause)
    if match is None:
        if possessive is None:
            return None
        value, scope = _object_and_scope(possessive.group("rest"))
        if not value and not scope:
            return None
        noun = possessive.group("noun").lower()
        return Frame(
            f"my {stem(noun)}", value, scope, change or bool(possessive.group("new")), False
        )
    aux = (match.group("aux") or "").strip().lower()
    verb = match.group("verb").lower()
    if aux in ("'m", "am", "'re", "are"):
        if not verb.endswith("ing") or len(verb) < 5:
            return None  # "I'm tired", "I'm in Lisbon": no verb of a state
        if stem(verb) in _NOT_PROGRESSIVE:
            return None  # "I'm staying positive", "I'm getting ready": no held state
    rest = match.group("rest")
    if aux == "have" and verb in _DETERMINERS:
        # "I have a question / a meeting" hold nothing to end later; a named possession
        # does: "I have a 2015 Golf", "we have a cat called Miso" (read as "have").
        rest = f" {match.group('verb')}{rest}"
        if not _NAMED_THING.match(rest):
            return None
    elif aux in ("'ve", "have"):
        if verb != "had":
            return None  # a present perfect is an event ("I've been to Rome"), but "had"
        verb = "have"
    elif verb in _NOT_STATES or verb.endswith("ed") or verb.endswith("n't"):
        return None
    if aux == "have" and verb in _DETERMINERS:
        verb = "have"
    elif verb in _NOT_STATES and verb != "have":
        return None
    key = stem(verb)
    first = _words(rest)[:1]
    if first and first[0] in _PARTICLES and first[0] not in ("at", "in", "for"):
        key += " " + first[0]
        rest = rest.lstrip()[len(first[0]) :]
    obj, scope = _object_and_scope(rest)
    negated = bool(match.group("neg"))
    if not obj and not scope and not negated and not (aux == "" and _HOW_OFTEN.match(rest)):
        return None
    return Frame(key, obj, scope, change, negated, bool(_PARTITIVE.match(rest)))


_DETERMINERS = _wordset("a an the my our two three")
# A possession named by a name or a figure within its first words.
_NAMED_THING = re.compile(
    r"\s+(?:a|an|the|my|our|two|three|\d+)\s+"
    r"(?:(?!(?:with|at|for|on|in|to|from|and|of|about)\b)[\w'-]+\s+){0,3}?"
    r"(?-i:(?:[A-Z][\w'-]*|\d[\w'-]*))",
    re.I,
)
# A habit said without an object, by how much or how often: "I smoke about ten a day",
# "I run most mornings", "I drink socially". What ends it is "I quit smoking".
_HOW_OFTEN = re.compile(
    r"\s*(?:about|around|roughly|every|each|most|daily|once|twice|\d+|socially|"
    r"occasionally|regularly|a\s+lot|loads|heavily|like\s+a)\b",
    re.I,
)


# A habit given up ("I quit smoking", "I stopped going to the gym"): the state of that
# verb ended, as "I no longer smoke" says it.
_STOPPED = re.compile(
    r"\b(?:i|we)(?:'ve|\s+have)?\s+(?:(?:just|finally|recently|completely|totally)\s+)*"
    r"(?:quit|stopped|gave\s+up|given\s+up|kicked|cut\s+out)\s+(?P<verb>[a-z]{2,}ing)\b"
    r"(?P<rest>[^.!?;]*)",
    re.I,
)
# A thing no longer had ("I sold the Golf", "we got rid of the van"): the states of
# having, owning, driving or riding it ended.
_DISPOSED = re.compile(
    r"\b(?:i|we)(?:'ve|\s+have)?\s+(?:(?:just|finally|recently|already)\s+)*"
    r"(?:sold|got\s+rid\s+of|gave\s+away|given\s+away|scrapped|traded\s+in|wrote\s+off|"
    r"written\s+off|totall?ed)\s+(?P<rest>[^.!?;]*)",
    re.I,
)
_HELD = ("have", "own", "drive", "ride")
# Words that tell one's own thing from itself at another time: "my old bike".
_NOT_DISTINCT = frozenset(("old", "new", "trusty", "beloved", "little", "first"))


def _ended_states(clause: str) -> list[Frame]:
    """The frames a clause says ended by an event rather than a negation."""
    stopped = _STOPPED.search(clause)
    if stopped is not None:
        key = stem(stopped.group("verb"))
        rest = stopped.group("rest")
        first = _words(rest)[:1]
        if first and first[0] in _PARTICLES and first[0] not in ("at", "in", "for"):
            key += " " + first[0]
            rest = rest.lstrip()[len(first[0]) :]
        obj, scope = _object_and_scope(rest)
        return [Frame(key, obj, scope, True, True)]
    disposed = _DISPOSED.search(clause)
    if disposed is not None:
        obj, _ = _object_and_scope(disposed.group("rest"))
        if obj:
            return [Frame(key, obj, frozenset(), True, True, strict=True) for key in _HELD]
    return []


def holds_all(held: str, named: str) -> bool:
    """Whether ``held`` has every content word of ``named`` (by stem)."""
    words = {stem(w) for w in _words(named) if w not in _TIME and w not in _TITLES}
    words -= {stem(w) for w in _NOT_DISTINCT}
    theirs = {stem(w) for w in _words(held) if w not in _TIME and w not in _TITLES}
    return bool(words) and words <= theirs


def frames(text: str) -> list[Frame]:
    """The frames a statement's first-person clauses hold, in order (a question holds
    none); one per clause, but for a thing no longer had (one per verb of having)."""
    # "Dr. Okafor" is one name, not the end of a sentence.
    text = _HONORIFIC.sub(r"\1 ", text)
    # A change counts in its own clause only: chat is full of "now" and "new" said
    # about something else.
    found = []
    for clause in clauses_of(text):
        if clause.rstrip().endswith("?"):
            continue
        ended = _ended_states(clause)
        if ended:
            found.extend(ended)
            continue
        frame = _clause_frame(clause)
        if frame is not None:
            found.append(frame)
    return found


def frame_of(text: str, key: str) -> Frame | None:
    """The frame of ``key`` in an older statement (its scope is not stored)."""
    return next((f for f in frames(text) if f.key == key), None)


def same_object(a: str, b: str) -> bool:
    """Two objects that share a content word, by stem ("coffee", "three coffees")."""
    words_a = {stem(w) for w in _words(a) if w not in _TIME and w not in _TITLES}
    words_b = {stem(w) for w in _words(b) if w not in _TIME and w not in _TITLES}
    return bool(words_a & words_b)


def scopes_agree(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two statements' scopes may be the same situation: either has none, or
    they share a word. "at home" and "at work" exclude each other."""
    return not a or not b or bool(a & b)


def slot_attribute(frame: Frame) -> str:
    """The slot attribute of a frame ("~use", "~go_to", "~my_doctor")."""
    return "~" + "_".join(frame.key.split())


def is_frame_slot(slot: str | None) -> bool:
    return slot is not None and slot.partition(":")[2].startswith("~")
