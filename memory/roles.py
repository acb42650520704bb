"""Roles: the job a person says they hold now, read by rules without a model.

People say a job in many shapes: "I'm a sous chef at a tapas place", "I'm head
chef now", "guess who's head chef now!" (memory/slot_grammar.py reads "guess
who" as the speaker), "Head chef now!", "I work as a paralegal", "I've joined
the ESB as an apprentice trainer", "I got hired as a barista", "I landed the
junior developer role", "my new job as a night porter", "they made me team
lead", "I've been promoted to charge nurse", "I became a midwife". Each reading
finds where a title starts; the title itself is read by one function
(``title_at``): up to five words ending in the head noun of an occupation
(``OCCUPATIONS``, a broad closed list: chef, electrician, trainer, nurse,
paralegal, sommelier ...), so a statement of any current title claims
``job_title`` and ends an older, different one (memory/validity.py), and a new
employer named beside it ("at Google", "joined the ESB", "with a small firm")
claims ``employer``.

What claims no job, so that no real job is ended by it (Graphiti #1728):

- someone else's ("my brother is an electrician": every reading needs "I");
- the past ("I used to be a nurse", "when I was a waiter", "I started out as a
  waiter", a joining dated more than ``HISTORY_DAYS`` before it was said: "I
  joined Acme as an intern in 2015");
- a wish or a guess (memory/slots.py drops conditional clauses: "I'd love to be
  a chef", "I might become a manager"), what others think ("she thinks I'm a
  great manager", "they treat me like I'm the manager");
- a second job said as one (memory/slots.py's ``_ADDITIVE``: "I'm also a yoga
  instructor", "I'm a DJ at weekends": they add to the job, not replace it);
- a title of a club, a game or an evening ("I'm the treasurer of the book
  club", "I'm the driver tonight"), how well or for fun ("a good cook", "an
  amateur photographer"), a former or future one ("an ex-teacher").
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from memory.slot_grammar import SOON, VALUE, Claim, normal, value_of, wordset
from memory.timeparse import resolve_window

# The head nouns of job titles: the last word of "senior backend developer", "head
# chef", "apprentice trainer". A title that ends in another word claims nothing (a
# missed role leaves both statements current; a wrong one would end a real job).
# Words that are mostly a hobby or a kind of person when said alone ("runner",
# "gamer", "fan", "member", "volunteer", "captain", "partner") are left out.
OCCUPATIONS = wordset(
    # offices, management, business
    "manager director officer executive administrator admin coordinator supervisor "
    "consultant specialist analyst associate assistant secretary receptionist clerk "
    "bookkeeper accountant auditor controller comptroller actuary underwriter adjuster "
    "planner strategist marketer recruiter buyer merchandiser negotiator adviser advisor "
    "intern trainee apprentice employee staffer contractor freelancer entrepreneur "
    "founder cofounder co-founder proprietor ceo cto cfo coo cmo cio cso vp president "
    "pm chairman chairwoman chairperson treasurer registrar ombudsman liaison fundraiser "
    "organiser organizer estimator valuer appraiser assessor examiner inspector "
    "investigator dispatcher scheduler expeditor "
    # law, finance, sales
    "lawyer solicitor barrister attorney judge magistrate paralegal notary conveyancer "
    "banker broker trader teller cashier economist statistician salesperson salesman "
    "saleswoman representative realtor telemarketer "
    # technology, science, engineering
    "engineer developer programmer coder designer architect tester sysadmin dba sre "
    "technologist technician webmaster modeller modeler scientist researcher chemist "
    "biologist physicist geologist ecologist botanist zoologist astronomer mathematician "
    "archaeologist anthropologist historian linguist epidemiologist postdoc draughtsman "
    "draftsman surveyor cartographer metallurgist "
    # health and care
    "nurse doctor surgeon physician gp dentist orthodontist vet veterinarian pharmacist "
    "paramedic emt medic physio physiotherapist therapist psychologist psychiatrist "
    "psychotherapist counsellor counselor midwife doula carer caregiver radiographer "
    "radiologist hygienist optician optometrist audiologist dietitian dietician "
    "nutritionist podiatrist chiropractor osteopath anaesthetist anesthetist "
    "anesthesiologist paediatrician pediatrician cardiologist oncologist neurologist "
    "dermatologist obstetrician gynaecologist gynecologist pathologist sonographer "
    "phlebotomist orderly practitioner houseman pharmacologist "
    # education
    "teacher lecturer professor tutor instructor coach trainer headteacher headmaster "
    "headmistress principal dean librarian educator invigilator provost chancellor "
    # trades and building
    "electrician plumber carpenter joiner builder bricklayer labourer laborer decorator "
    "plasterer roofer tiler glazier welder fitter mechanic machinist fabricator "
    "locksmith handyman gardener landscaper groundskeeper groundsman arborist caretaker "
    "janitor custodian cleaner housekeeper maid porter concierge doorman bouncer guard "
    "foreman installer upholsterer blacksmith stonemason mason "
    "scaffolder steelworker miner quarryman "
    # transport and logistics
    "driver courier pilot conductor chauffeur trucker cabbie steward stewardess "
    "attendant deckhand seaman mariner docker stevedore postman postwoman postie "
    "warehouseman picker packer removalist "
    # hospitality, retail, personal services
    "chef cook baker butcher barista bartender barman barmaid waiter waitress server "
    "hostess sommelier busser dishwasher caterer shopkeeper grocer fishmonger "
    "greengrocer stocker florist hairdresser barber stylist beautician manicurist "
    "esthetician aesthetician tattooist tattooer masseur masseuse tailor seamstress "
    "dressmaker cobbler jeweller jeweler nanny childminder babysitter butler "
    "zookeeper groomer kennelman croupier bookmaker lifeguard "
    # media and arts
    "journalist editor reporter writer copywriter author columnist correspondent "
    "photographer videographer cinematographer filmmaker producer presenter "
    "broadcaster actor actress musician singer songwriter composer dancer "
    "choreographer artist illustrator animator painter sculptor curator archivist "
    "translator interpreter publicist influencer podcaster narrator dj "
    "typesetter printer publisher proofreader "
    # public service, faith, the forces
    "firefighter fireman firewoman policeman policewoman constable detective sergeant "
    "soldier lieutenant corporal colonel diplomat politician councillor "
    "councilor mayor minister senator mp priest vicar pastor rabbi imam chaplain "
    "reverend curate caseworker warden ranger coroner bailiff "
    # land and sea
    "farmer farmhand rancher fisherman shepherd vintner winemaker brewer distiller "
    "forester gamekeeper horticulturist agronomist jockey"
)
# Heads that are a job only after a word that says which: "team lead", "deputy head",
# "social worker", "machine operator", "estate agent", "sales rep", "content creator",
# "civil servant", "dog walker", "pet sitter", "mail carrier". "Owner" only after a
# business ("shop owner", not "dog owner").
NEEDS_MODIFIER = wordset(
    "lead head worker operator agent rep creator servant walker sitter carrier fellow"
)
BUSINESSES = wordset(
    "business shop store restaurant cafe café bar pub salon studio bakery company firm "
    "agency practice gym hotel boutique franchise clinic garage brewery farm"
)
# Two-word heads.
COMPOUNDS = frozenset({"scrum master", "product owner", "au pair", "vice president"})
# Words before a head that make it no job: how well or for fun ("a good cook", "an
# amateur photographer", "a backseat driver"), not now ("a former nurse", "an
# ex-teacher", "a future doctor"), unpaid ("a volunteer firefighter").
NOT_JOBS = wordset(
    "good great decent terrible bad awful amazing brilliant fantastic keen huge big massive "
    "natural born better best worse worst home amateur wannabe aspiring backseat weekend "
    "hobby self-taught designated budding avid passionate lousy careful cautious nervous "
    "confident safe reckless slow fast quick hard picky fussy messy lucky proud "
    "former ex onetime one-time erstwhile future would-be retired volunteer unpaid learner "
    "stronger weaker free regular daily casual occasional social serious light heavy"
)
# Words that make an object no employer: "I joined the book club as a coach", "I'm the
# treasurer of the residents' association".
NOT_EMPLOYERS = wordset(
    "club team society choir band league committee association group class course gym "
    "church community circle crew squad troupe orchestra pta forum game match quiz "
    "party family household house home flat relationship marriage"
)
# Nouns that make "with X" an employer: "an electrician with a small firm in Cork"
# (not "a manager with five reports").
ORG_NOUNS = BUSINESSES | wordset(
    "council charity startup start-up bank consultancy trust hospital school college "
    "university factory plant mill department ministry authority service outfit "
    "partnership cooperative co-op nonprofit non-profit organisation organization "
    "institute lab laboratory newspaper magazine publisher network chain"
)
# A title that may stand without an article opens with one of these ("I'm head chef
# at Nopi", "I'm senior engineer now").
_RANKS = wordset(
    "head chief senior junior lead principal staff deputy assistant associate sous "
    "executive managing acting interim trainee apprentice station general"
)
# Words that end a title (function words, and "now").
_STOPS = wordset(
    "of the a an in at for and or with to on my your his her their our is was from by as "
    "who that this now but so when while because since which where"
)
# A joining told as history: "I started out as a waiter", "I joined Acme as an intern
# back in 2015", "my first job was as a porter".
HISTORY_DAYS = 365
_HISTORY = re.compile(
    r"\b(?:years?\s+ago|back\s+(?:then|in|when)|at\s+first|originally|initially|"
    r"in\s+the\s+(?:beginning|past)|out\s+of\s+(?:college|uni|university|school)|"
    r"(?:my|the)\s+(?:first|old|previous|last)\s+job|started\s+(?:out|off)|"
    r"when\s+i\s+was|used\s+to|as\s+a\s+(?:kid|teen|teenager|student)|career)\b",
    re.I,
)
# What others think of one, and comparisons: "she thinks I'm a great manager", "they
# treat me like I'm the manager".
_OTHERS_SAY = re.compile(
    r"\b(?:like|as\s+if|as\s+though|pretend(?:ing)?|thinks?|thought|says?|said|joked?|"
    r"imagine|dreamt|dreamed|unless)\s+(?:that\s+)?$",
    re.I,
)
# After a title: a title of a club, a game or an evening, or of one's training only.
# "In" or "on" a team or a group is a unit at work ("a developer on the payments team");
# "of" or "for" one, or "in" a club, is not ("the captain of the football team").
_WORK_UNITS = wordset("team group crew squad")
_NOT_A_JOB_AFTER = re.compile(
    rf"\s+(?:(?:of|at|for|with)\s+(?:the\s+|our\s+|my\s+|a\s+|an\s+)?(?:[\w'-]+\s+){{0,3}}?"
    rf"(?:{'|'.join(sorted(NOT_EMPLOYERS))})\b|"
    rf"(?:in|on)\s+(?:the\s+|our\s+|my\s+|a\s+|an\s+)?(?:[\w'-]+\s+){{0,3}}?"
    rf"(?:{'|'.join(sorted(NOT_EMPLOYERS - _WORK_UNITS))})\b|"
    r"of\s+the\s+(?:month|year|week)\b|by\s+(?:training|background|education|degree|nature)\b|"
    r"at\s+heart\b|"
    r"in\s+(?:the|a|my|our)\s+(?:game|play|show|film|movie|musical|dream|story|video)\b)",
    re.I,
)
# A role for one evening, said as a state: "I'm the driver tonight".
_FOR_NOW_AFTER = re.compile(
    r"\s+(?:tonight|today|this\s+(?:evening|weekend|week)|for\s+(?:the|this|tonight's|"
    r"today's)\s+(?:day|night|evening|weekend|trip|party|game|match|event))\b",
    re.I,
)
# What follows "for" that names no employer: "a carer for my mum", "a teacher for ten
# years".
_NO_ORG = re.compile(
    r"^(?:my|our|his|her|their|your|him|them|me|myself|\d|a\s+(?:while|bit|living|change)\b)|"
    r"\b(?:years?|months?|weeks?|days?|decades?|ages|hours?|life|now)$",
    re.I,
)
_AFTER = re.compile(rf"(?P<now>\s+now\b)?(?:\s+(?P<prep>at|for|with)\s+{VALUE})?", re.I)
_TOKEN = re.compile(r"\s*([\w']+(?:-[\w']+)*)")  # "manager-" is "manager"

_SOON = SOON
_CUES = re.compile(r"\b(?:now|finally|officially|newly|new)\b", re.I)

# "I'm a nurse at St Mary's", "I'm now an engineering manager", "I'm head chef now",
# "I've been a product designer at Spotify", "I'm working as a waiter".
_STATE = re.compile(
    rf"\bi(?:'m|\s+am|'ve\s+been|\s+have\s+been)\s+(?P<soon>{_SOON})"
    rf"(?:(?:working|employed)\s+as\s+)?(?P<art>(?:a|an|the)\s+)?",
    re.I,
)
# Given a role: "they finally made me team lead", "I was made head of sales", "I became
# a charge nurse", "I've been promoted to sous chef", "they appointed me deputy head",
# "I took over as head chef".
_GIVEN = re.compile(
    r"(?:\b(?:they|he|she|my\s+boss|my\s+manager|the\s+company|management|the\s+board|"
    r"the\s+owners?)(?:'ve|'s|\s+have|\s+has)?\s+(?:\w+\s+)?(?:made|promoted|appointed|named|"
    r"hired|took\s+on|taken\s+on)\s+"
    r"me(?:\s+(?:to|as))?|"
    r"\bi(?:\s+was|\s+got|'ve\s+been|\s+have\s+been)\s+(?:\w+\s+)?(?:made|appointed(?:\s+as)?|"
    r"promoted\s+to|bumped\s+up\s+to)|"
    r"\bi(?:'ve|\s+have)?\s+(?:\w+\s+)?(?:became|become|moved\s+up\s+to|stepped\s+up\s+as|"
    r"took\s+over\s+as|taken\s+over\s+as|qualified\s+as)|"
    r"\bmy\s+(?:new\s+)?(?:role|position|job|title)\s+is(?:\s+now)?)"
    r"\s+(?P<art>(?:a|an|the|their|our|his|her)\s+)?",
    re.I,
)
# A job started or held, with the title after "as": "I've joined the ESB as an
# apprentice trainer", "I started at Google as a PM", "I got hired as a barista", "I
# took a job as a paralegal", "I work as a sommelier", "I'm working as a waiter".
_AS = re.compile(
    r"(?:\bi(?:'ve|\s+have)?\s+" + _SOON + r"(?P<verb>(?:been\s+|got\s+)?(?:hired|taken\s+on|"
    r"brought\s+(?:in|on)|employed|signed\s+on|kept\s+on)|re-?joined|joined|started|began|"
    r"(?:got|gotten|took|taken|accepted|landed|found|started)\s+(?:a|the|my|up\s+a|up\s+the)\s+"
    r"(?:new\s+)?"
    r"(?:full-time\s+|permanent\s+)?(?:job|position|role|post|contract|gig)|work|"
    r"(?:been\s+)?working)|"
    r"\bi(?:'m|\s+am)\s+" + _SOON + r"(?P<state>working|employed))\b"
    r"(?P<mid>(?:\s+(?!as\b)[\w'&.-]+){0,6}?)\s+as\s+(?P<art>(?:a|an|the)\s+)?",
    re.I,
)
# "I got the head chef job", "I landed a junior developer role at Monzo".
_GOT_THE_JOB = re.compile(
    r"\bi(?:'ve|\s+have)?\s+" + _SOON + r"(?:got|landed|accepted|took|won|secured|started)\s+"
    r"(?P<art>(?:the|a|an)\s+)(?:new\s+)?",
    re.I,
)
_JOB_NOUN = re.compile(r"\s+(?:job|role|position|post|gig)\b", re.I)
# "my new job as a night porter", "my current role as team lead".
_MY_JOB_AS = re.compile(
    r"\bmy\s+(?P<new>new\s+|current\s+)?(?:job|role|position|post|work)\s+as\s+"
    r"(?P<art>(?:a|an|the)\s+)?",
    re.I,
)
# A clause that is only a title: "Head chef now!", "Officially a manager!".
_ONLY = re.compile(r"^(?:(?P<cue>officially|finally|now)\s+)?(?P<art>(?:a|an|the)\s+)?", re.I)
_ONLY_END = re.compile(r"(?P<now>\s+now)?[\s!.]*$", re.I)
# Where "joined ..." names an employer: "joined the ESB", "joined Acme".
_NAMED_ORG = re.compile(rf"^\s+(?:(?:at|for|by|with)\s+)?(?:the\s+)?(?-i:(?=[A-Z])){VALUE}")
_AT_ORG = re.compile(rf"^\s+(?:at|for|by|with)\s+{VALUE}", re.I)


def _is_head(word: str, before: list[str]) -> bool:
    if word.endswith("'s") or word.endswith("'"):
        return False
    piece = word.rsplit("-", 1)[-1]
    if before and f"{before[-1]} {word}" in COMPOUNDS:
        return True
    if word in OCCUPATIONS or piece in OCCUPATIONS:
        return True
    if piece == "owner":
        return bool(before) and before[-1] in BUSINESSES
    return piece in NEEDS_MODIFIER and bool(before)


def title_at(text: str, start: int = 0) -> tuple[str, int] | None:
    """The job title ``text`` holds from ``start`` (up to four words before the head
    noun, none a function word; the longest: "assistant manager", not "assistant"), and
    where it ends. None when the words there end in no occupation, or say the job is
    none ("a good cook", "an ex-teacher")."""
    words: list[str] = []
    best: tuple[int, int] | None = None
    pos = start
    while len(words) < 6:
        token = _TOKEN.match(text, pos)
        if token is None:
            break
        word = token.group(1).lower()
        if word in _STOPS:
            # "head of sales", "head of customer success": the head and what it heads.
            if word == "of" and words and words[-1] == "head":
                headed = _TOKEN.match(text, token.end())
                if headed is not None and headed.group(1).lower() not in _STOPS:
                    words += ["of", headed.group(1).lower()]
                    best = (len(words), headed.end())
            break
        if _is_head(word, words):
            best = (len(words) + 1, token.end())
        words.append(word)
        pos = token.end()
    if best is None or best[0] > 5:
        return None
    title = words[: best[0]]
    if any(w.split("-")[0] in NOT_JOBS or w in NOT_JOBS for w in title[:-1]) or (
        "-" in title[-1] and title[-1].split("-")[0] in NOT_JOBS
    ):
        return None
    return " ".join(title), best[1]


def _employer_after(clause: str, end: int) -> tuple[str, bool]:
    """The employer named right after a title ("at Nopi", "for Ocado", "with a small
    firm"), and whether "now" was said before it."""
    after = _AFTER.match(clause, end)
    if after is None:
        return "", False
    now = bool(after["now"])
    value = value_of(after)
    if not value or _NO_ORG.search(after["value"].strip()):
        return "", now
    if (after["prep"] or "").lower() == "with":
        raw = after["value"].strip()
        if not (raw[:1].isupper() or value.split()[-1] in ORG_NOUNS):
            return "", now  # "a manager with five reports"
    if value.split()[-1] in NOT_EMPLOYERS:
        return "", now
    return value, now


def told_as_history(clause: str, at: datetime | None) -> bool:
    """Whether a clause tells of a job held before: "I started out as a waiter", "I
    joined Acme as an intern in 2015" (dated more than ``HISTORY_DAYS`` back)."""
    if _HISTORY.search(clause):
        return True
    if at is None:
        return False
    window = resolve_window(clause, at)
    return window is not None and window.end < (at - timedelta(days=HISTORY_DAYS)).date()


def _a_title(clause: str, match: re.Match[str]) -> tuple[str, int] | None:
    """The title a reading's match opens, unless others are said to think it or it is
    one of a club, a game or an evening."""
    if _OTHERS_SAY.search(clause[: match.start()]):
        return None
    found = title_at(clause, match.end())
    if found is None or _NOT_A_JOB_AFTER.match(clause, found[1]):
        return None
    return found


def role_claims(clause: str, at: datetime | None) -> list[Claim]:
    """The role one first-person clause claims: ``job_title`` and, when it names one,
    ``employer``. Not for a clause that ends a job (memory/statuses.py reads those)."""
    title, employer, renews = "", "", False
    for pattern in (_GIVEN, _MY_JOB_AS, _AS, _GOT_THE_JOB):
        match = pattern.search(clause)
        if match is None:
            continue
        found = _a_title(clause, match)
        if found is None or told_as_history(clause, at):
            continue
        title, end = found
        if pattern is _GOT_THE_JOB:
            job = _JOB_NOUN.match(clause, end)
            if job is None:
                continue  # "I got the chef a present" is no job
            end = job.end()  # "the junior developer role at Monzo"
        employer, _ = _employer_after(clause, end)
        groups = match.groupdict()
        if pattern is _AS:
            mid = groups["mid"] or ""
            if mid.split()[-1:] and mid.split()[-1].lower() in NOT_EMPLOYERS:
                return []  # "I joined the book club as a coach"
            named = (_AT_ORG if (groups["verb"] or "").lower() != "joined" else _NAMED_ORG).match(
                mid
            )
            if named is not None and named["value"] and not employer:
                employer = normal(named["value"])
            # A job started is a change; one held ("I work as") a state.
            renews = not groups["state"] and (groups["verb"] or "").lower() not in (
                "work",
                "working",
                "been working",
            )
        else:
            renews = pattern is not _MY_JOB_AS or bool(groups["new"])
        break
    else:
        title, employer, renews = _stated(clause)
    if not title:
        return []
    if title.startswith("new "):  # "I'm the new manager": a change, of "manager"
        title, renews = title.removeprefix("new "), True
    out = [Claim("job_title", title, renews=renews)]
    if employer and employer.split()[-1] not in NOT_EMPLOYERS:
        out.append(Claim("employer", employer))
    return out


def _stated(clause: str) -> tuple[str, str, bool]:
    """A role said as a state: "I'm a nurse at St Mary's", "I'm head chef now", or a
    clause that is a title alone ("Head chef now!")."""
    for match in _STATE.finditer(clause):
        found = _a_title(clause, match)
        if found is None:
            continue
        title, end = found
        if _FOR_NOW_AFTER.match(clause, end):
            continue  # "I'm the driver tonight"
        employer, now = _employer_after(clause, end)
        said_now = now or bool(_CUES.search(match["soon"] or "")) or title.startswith("new ")
        # Without an article a title is one only with a rank or said as new ("I'm head
        # chef at Nopi", "I'm manager now"), not "I'm driver tonight".
        if not match["art"] and not (said_now or employer or title.split()[0] in _RANKS):
            continue
        return title, employer, said_now
    only = _ONLY.match(clause)
    if only is not None:
        alone = title_at(clause, only.end())
        if alone is not None:
            rest = _ONLY_END.match(clause, alone[1])
            if rest is not None and (rest["now"] or only["cue"]):
                return alone[0], "", True
    return "", "", False
