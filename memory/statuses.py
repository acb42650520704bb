"""Statuses and the life events that change them, read by rules without a model.

Much of what people say about their lives is an event, not a state: "I got
promoted at work!", "I got laid off", "I graduated", "I went vegan", "Miso
passed away". Each event says what holds from then on — a job with a new title,
no job, no longer a student, a diet, no cat — so it is read as a claim on the
slot of that status (memory/slot_grammar.py's ``Claim``), beside the plain
statements of the status ("I'm a nurse at St Mary's", "I'm a second-year
student at Edinburgh", "I'm vegetarian"):

- a role, in any of its shapes ("I'm a nurse at St Mary's", "they made me team
  lead", "I've joined the ESB as an apprentice trainer"): ``job_title`` (and
  ``employer`` when named), read by memory/roles.py by the head noun of the
  title, so "I'm a regular at the Crown" or "a member of the club" claim no job;
- a promotion without a title: ``job_title`` renewed to a value it does not name;
- the end of a job (laid off, fired, sacked, let go, made redundant, "lost/quit/
  left my job", resigned, retired, "I'm unemployed / between jobs"): ``employer``
  and ``job_title`` end; going freelance: ``employer`` becomes "self-employed";
- studies: "I'm a (PhD / second-year ...) student at X" (``studies``), ended by
  "I graduated", "I finished my degree/PhD", "I dropped out";
- "I'm single (again)": ``partner`` ends;
- a diet, a closed class ("vegan", "vegetarian", "pescatarian" ...): "I'm X",
  "I went / have gone / became X": ``uses_diet`` (the slot "I switched to vegan"
  already fills);
- a death: "NAME died / passed away", "my/our (old) NOUN died": ends the
  statements of names and of what one has that hold that name or noun.

The stopping of a habit ("I quit smoking") and the sale of a thing ("I sold the
Golf") end a state said as a frame, so they are read in memory/frames.py.

What makes a claim of none of these: someone else's event ("my sister got
promoted", "they laid off half my team"), a wish or a worry ("I'm hoping to get
promoted", "I might get laid off": the clause's conditional words), a second
role said as one ("I'm also a yoga instructor", "I also became a volunteer":
they add, memory/slots.py drops them), another sense of the verb ("I'm so fired
up", "I quit sugar", "I retired my old laptop").
"""

from __future__ import annotations

import re
from datetime import date, datetime

from memory.roles import role_claims
from memory.slot_grammar import SOON, VALUE, Claim, normal, value_of, wordset
from memory.timeparse import resolve_window

_STUDENT = (
    r"(?P<title>(?:(?:first|second|third|fourth|final|1st|2nd|3rd|4th)[- ]year\s+|phd\s+|"
    r"grad(?:uate)?\s+|postgrad(?:uate)?\s+|master'?s\s+|undergrad(?:uate)?\s+|college\s+|"
    r"uni(?:versity)?\s+|[a-z]+\s+)?student)\b"
)
_DIETS = (
    r"vegan|vegetarian|veggie|pescatarian|pescetarian|plant-based|keto|paleo|carnivore|"
    r"flexitarian|gluten-free|dairy-free|teetotal"
)
_PETS = wordset("dog cat puppy kitten hamster rabbit bunny parrot horse tortoise")

_I_AM = r"\bi(?:'m|\s+am|'ve\s+been|\s+have\s+been)\s+"
_I_HAVE = r"\bi(?:'ve|\s+have)?\s+"
_SOON = SOON

# A promotion that names no title: the title changed, to one not said.
_PROMOTED = re.compile(
    rf"(?:{_I_HAVE}{_SOON}(?:got|get|been|was)\s+(?:a\s+)?promot(?:ed|ion)\b(?!\s+to\b)|"
    rf"\b(?:they|he|she|my\s+boss|my\s+manager)\s+(?:\w+\s+)?promoted\s+me\b(?!\s+to\b))",
    re.I,
)
# The end of a job.
_JOB_ENDED = re.compile(
    rf"(?:{_I_HAVE}{_SOON}(?:was|got|been|get)\s+(?:\w+\s+)?(?:laid\s+off|fired(?!\s+up)|"
    rf"sacked|let\s+go(?!\s+of)|made\s+redundant|terminated)\b|"
    rf"{_I_HAVE}{_SOON}(?:lost|quit|left)\s+my\s+(?:job|position|role)\b|"
    rf"{_I_HAVE}{_SOON}(?:resigned|retired|handed\s+in\s+my\s+notice)\b"
    rf"(?!\s+(?:myself|the|my|our|it|them|a|an)\b)|"
    rf"\bi(?:'m|\s+am)\s+{_SOON}(?:unemployed|out\s+of\s+work|between\s+jobs|jobless|retired|"
    rf"on\s+the\s+dole)\b)"
    rf"(?:\s+(?:from|at)\s+{VALUE})?",
    re.I,
)
_FREELANCE = re.compile(
    rf"(?:{_I_HAVE}{_SOON}(?:went|gone|turned)\s+(?:fully\s+)?freelance\b|"
    rf"\bi(?:'m|\s+am)\s+{_SOON}(?:freelance|freelancing|self[- ]employed|my\s+own\s+boss)\b)",
    re.I,
)
_STUDYING = re.compile(rf"{_I_AM}{_SOON}(?:a|an)\s+{_STUDENT}(?:\s+(?:at|in)\s+{VALUE})?", re.I)
_STUDIES_ENDED = re.compile(
    rf"{_I_HAVE}{_SOON}(?:graduated|dropped\s+out|"
    r"(?:finished|completed)\s+(?:uni|university|college|school|my\s+(?:degree|studies|"
    r"course|phd|masters|master's|doctorate|dissertation|thesis)))\b",
    re.I,
)
_SINGLE = re.compile(rf"\bi(?:'m|\s+am)\s+{_SOON}single\b(?!-)", re.I)
_DIET = re.compile(
    rf"(?:{_I_AM}{_SOON}(?:fully\s+|strictly\s+|mostly\s+)?(?P<value>{_DIETS})|"
    rf"{_I_HAVE}{_SOON}(?P<change>went|gone|become|became|turned)\s+"
    rf"(?:fully\s+|completely\s+|full\s+)?(?P<changed>{_DIETS}))(?![\w-])",
    re.I,
)
# "Miso passed away", "our old dog died"; not "my neighbour's cat died".
_GONE = re.compile(
    r"(?:(?-i:\b(?P<name>[A-Z][a-z]+))|\b(?:my|our)\s+(?:(?:old|dear|beloved|sweet|poor|"
    r"lovely|little|first)\s+)*(?P<noun>[a-z]+)\b(?!'s))\s+(?:has\s+|had\s+|was\s+)?"
    r"(?:passed\s+away|died|been\s+put\s+down|put\s+down|put\s+to\s+sleep)",
    re.I,
)
_NOT_NAMES = wordset("i it he she they we this that there he's she's")


# The frame verbs (stems, memory/frames.py) of a status: the end of the status ends
# them too ("I work nights" when the job ended, "I study law" when one graduated).
STATUS_FRAMES: dict[str, tuple[str, ...]] = {"employer": ("work",), "studies": ("studi",)}


def _until(clause: str, at: datetime | None) -> date | None:
    """The last day an event may have happened when the clause dates it."""
    window = None if at is None else resolve_window(clause, at)
    return None if window is None else window.end


def status_claims(clause: str, at: datetime | None) -> list[Claim]:
    """The status claims of one first-person clause (not a question, not conditional)."""
    out: list[Claim] = []
    ended = _JOB_ENDED.search(clause)
    if ended is not None:
        until = _until(clause, at)
        out.append(Claim("employer", "", old=value_of(ended), ends=True, until=until))
        out.append(Claim("job_title", "", ends=True, until=until))
    else:
        # A role (memory/roles.py): "I'm a nurse at St Mary's", "they made me team lead".
        out += role_claims(clause, at)
        if _PROMOTED.search(clause) and not any(c.attribute == "job_title" for c in out):
            out.append(Claim("job_title", "", renews=True))
    if _FREELANCE.search(clause):
        out.append(Claim("employer", "self-employed", renews=True))
    studying = _STUDYING.search(clause)
    if studying is not None:
        out.append(Claim("studies", value_of(studying) or normal(studying.group("title"))))
    if _STUDIES_ENDED.search(clause):
        out.append(Claim("studies", "", ends=True, until=_until(clause, at)))
    if _SINGLE.search(clause):
        out.append(Claim("partner", "", ends=True))
    diet = _DIET.search(clause)
    if diet is not None:
        value = (diet["value"] or diet["changed"]).lower()
        out.append(Claim("uses_diet", value, renews=bool(diet["change"])))
    gone = _GONE.search(clause)
    if gone is not None:
        who = (gone["name"] or gone["noun"] or "").lower()
        if who and who not in _NOT_NAMES:
            out.append(Claim("", "", old=who, ends=True, gone=True))
            if who in _PETS:
                out.append(Claim(f"{who}_name", "", ends=True))
    return out
