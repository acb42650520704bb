"""The scenarios of ``agentgw bench trust``: dated messages, then a question.

Each scenario is one person's messages (the person is "Ada"; a line starting
with "agent:" is the agent's reply) and a final question. ``current`` and
``old`` are words found only in the statement that is true now and in the one
it replaced; ``keep`` are words of statements that must never be ended (facts
about other things); ``conflict``: the last two statements disagree on the same
day and both must be flagged.

Two sets:

- ``TUNED``: written beside the rules of memory/slots.py, phrased as they read.
- ``HELD_OUT``: written after the rules were frozen (commit "memory: slots by
  rules ..."), without changing a rule afterwards, in phrasings meant to be
  ordinary rather than to match; and turns taken from LoCoMo where a fact
  changes (conv-30, conv-41; their own words and dates), each with the
  earlier state said in the speaker's words. Their figures are the honest ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scenario:
    name: str
    # (YYYY-MM-DD, text); "agent: ..." is the agent's reply.
    messages: tuple[tuple[str, str], ...]
    question: tuple[str, str]
    current: str = ""
    old: str = ""
    keep: tuple[str, ...] = ()
    conflict: bool = False
    speaker: str = "Ada"
    split: str = "tuned"
    extra: dict[str, str] = field(default_factory=dict)


def _s(name: str, *messages: tuple[str, str], q: tuple[str, str], **kw: object) -> Scenario:
    return Scenario(name, tuple(messages), q, **kw)  # type: ignore[arg-type]


TUNED: tuple[Scenario, ...] = (
    _s(
        "move",
        ("2025-01-10", "I live in Lisbon, near the old tram line."),
        ("2025-01-10", "agent: Lisbon sounds lovely!"),
        ("2025-06-02", "I moved from Lisbon to Porto last week."),
        q=("2025-07-01", "Where do I live?"),
        current="to Porto",
        old="live in Lisbon",
    ),
    _s(
        "move-no-from",
        ("2025-02-01", "I live in Berlin with two flatmates."),
        ("2025-09-01", "We just moved to Hamburg, still unpacking boxes."),
        q=("2025-10-01", "Which city am I in these days?"),
        current="Hamburg",
        old="Berlin",
    ),
    _s(
        "job",
        ("2024-11-03", "I work at Initech as a tester."),
        ("2025-04-20", "I started at Globex on Monday, new team and all."),
        q=("2025-05-10", "Where do I work?"),
        current="Globex",
        old="Initech",
    ),
    _s(
        "dog-name",
        ("2025-01-05", "My dog's name is Rex, he's a beagle."),
        ("2025-05-05", "My dog's name is Biscuit now, we renamed him after the shelter mixup."),
        q=("2025-06-01", "What's my dog called?"),
        current="Biscuit",
        old="is Rex",
    ),
    _s(
        "partner-broke-up",
        ("2024-12-01", "My boyfriend is Marco, we met at climbing."),
        ("2025-03-14", "We broke up last month, it's been rough."),
        q=("2025-04-01", "Am I seeing anyone?"),
        current="broke up",
        old="Marco",
    ),
    _s(
        "favourite",
        ("2025-01-01", "My favourite film is Alien."),
        ("2025-08-01", "My favourite film is now Arrival, sorry Ridley."),
        q=("2025-09-01", "What's my favourite film?"),
        current="Arrival",
        old="is Alien",
    ),
    _s(
        "switch",
        ("2025-01-01", "I use Vim for everything at work."),
        ("2025-01-20", "I switched from Vim to Emacs, don't judge."),
        q=("2025-03-01", "Which editor do I use?"),
        current="Emacs",
        old="everything at work",
        extra={"note": "the first statement claims no slot; only the named old value links"},
    ),
    _s(
        "no-longer",
        ("2025-01-10", "I work at Acme Corp in the design team."),
        ("2025-06-10", "I no longer work at Acme Corp, the layoffs got me."),
        q=("2025-07-10", "Do I still work at Acme?"),
        current="no longer",
        old="design team",
    ),
    _s(
        "title",
        ("2025-01-10", "I work as a junior analyst."),
        ("2025-07-10", "I got promoted to senior analyst!"),
        q=("2025-08-10", "What's my job title?"),
        current="senior analyst",
        old="junior analyst",
    ),
    _s(
        "plan-date",
        ("2025-03-01", "Our wedding is on June 14."),
        ("2025-04-01", "Our wedding got moved to September 6."),
        q=("2025-04-20", "When is the wedding?"),
        current="September 6",
        old="June 14",
    ),
    _s(
        "is-now",
        ("2025-02-02", "My address is 12 Rua Nova."),
        ("2025-09-09", "My address is now 40 Avenida Central."),
        q=("2025-10-01", "What is my address?"),
        current="Avenida Central",
        old="Rua Nova",
    ),
    _s(
        "conflict",
        ("2025-05-01", "My cat's name is Tom."),
        ("2025-05-01", "My cat's name is Felix."),
        q=("2025-05-02", "What is my cat called?"),
        current="Felix",
        old="Tom",
        conflict=True,
    ),
    _s(
        "unrelated",
        ("2025-01-01", "I live in Lisbon."),
        ("2025-02-01", "My sister lives in Berlin."),
        ("2025-03-01", "I love the food in Porto."),
        ("2025-04-01", "My favourite book is Dune."),
        ("2025-05-01", "My dog's name is Rex."),
        ("2025-06-01", "We visited Madrid last spring."),
        ("2025-07-01", "My favourite film is Alien."),
        q=("2025-08-01", "Where do I live?"),
        current="live in Lisbon",
        keep=("live in Lisbon", "Berlin", "Porto", "Dune", "Rex", "Madrid", "Alien"),
    ),
)

HELD_OUT: tuple[Scenario, ...] = (
    _s(
        "ho-relocated",
        ("2024-10-02", "I'm based in Toronto, downtown near the lake."),
        ("2025-03-18", "We relocated to Vancouver in March, the rain is real."),
        q=("2025-04-20", "Where am I living now?"),
        current="Vancouver",
        old="Toronto",
        split="held_out",
    ),
    _s(
        "ho-new-job",
        ("2024-09-09", "I'm working at Stark Industries, mostly on the billing system."),
        ("2025-02-02", "Just accepted an offer at Wayne Enterprises, first day is Monday."),
        q=("2025-03-01", "Who is my employer?"),
        current="Wayne",
        old="Stark",
        split="held_out",
    ),
    _s(
        "ho-new-job-2",
        ("2024-05-05", "I work for the city library, cataloguing old maps."),
        ("2025-01-15", "I got a job at the university archive, starting next week!"),
        q=("2025-02-15", "Where do I work these days?"),
        current="university archive",
        old="city library",
        split="held_out",
    ),
    _s(
        "ho-cat",
        ("2025-01-04", "Our cat is called Miso, she's tiny."),
        ("2025-06-04", "We named our new cat Nori, Miso passed away in May."),
        q=("2025-07-01", "What's the name of my cat?"),
        current="Nori",
        old="tiny",
        split="held_out",
    ),
    _s(
        "ho-girlfriend",
        ("2024-08-08", "My girlfriend is Priya, she's a nurse."),
        ("2025-02-10", "I'm dating Lena now, Priya and I split up in the winter."),
        q=("2025-03-10", "Who am I dating?"),
        current="Lena",
        old="she's a nurse",
        split="held_out",
    ),
    _s(
        "ho-favourite-food",
        ("2024-12-12", "My favorite food is ramen, always has been."),
        ("2025-07-07", "Honestly my favorite food has become tacos."),
        q=("2025-08-01", "What's my favorite food?"),
        current="tacos",
        old="ramen",
        split="held_out",
    ),
    _s(
        "ho-phone",
        ("2025-01-01", "I've had an iPhone for years."),
        ("2025-05-05", "I switched to a Pixel phone last month, the camera is great."),
        q=("2025-06-01", "What phone do I have?"),
        current="Pixel",
        old="iPhone",
        split="held_out",
    ),
    _s(
        "ho-quit",
        ("2024-10-10", "I work at Hooli on the search team."),
        ("2025-04-04", "I quit Hooli yesterday. Taking a break before whatever is next."),
        q=("2025-05-01", "Am I still at Hooli?"),
        current="quit Hooli",
        old="search team",
        split="held_out",
    ),
    _s(
        "ho-dont-live",
        ("2024-06-06", "I live in Leeds, in a terraced house."),
        ("2025-01-20", "I don't live in Leeds anymore, I'm in Manchester now."),
        q=("2025-02-20", "Do I live in Leeds?"),
        current="Manchester",
        old="terraced house",
        split="held_out",
    ),
    _s(
        "ho-interview",
        ("2025-03-03", "My interview is on March 20 at 10am."),
        ("2025-03-10", "The interview got rescheduled to March 27."),
        q=("2025-03-15", "When is my interview?"),
        current="March 27",
        old="March 20",
        split="held_out",
    ),
    _s(
        "ho-title",
        ("2024-04-04", "My title is Staff Engineer at the moment."),
        ("2025-04-04", "My title is now Principal Engineer, it finally went through."),
        q=("2025-05-05", "What is my title?"),
        current="Principal",
        old="Staff Engineer",
        split="held_out",
    ),
    _s(
        "ho-son",
        ("2025-02-02", "Our son is called Leo for now, we might change it."),
        ("2025-02-20", "We changed his name, our son's name is Theo."),
        q=("2025-03-20", "What's my son's name?"),
        current="Theo",
        old="might change",
        split="held_out",
    ),
    _s(
        "ho-conflict-work",
        ("2025-06-06", "I work at Umbrella Corp."),
        ("2025-06-06", "I work at Cyberdyne, not Umbrella, sorry typo."),
        q=("2025-06-07", "Where do I work?"),
        current="Cyberdyne",
        old="Umbrella Corp.",
        conflict=True,
        split="held_out",
    ),
    _s(
        "ho-unrelated",
        ("2024-01-01", "I live in Oslo."),
        ("2024-02-01", "My brother lives in Bergen."),
        ("2024-03-01", "I work at Equinor."),
        ("2024-04-01", "My wife works at the hospital."),
        ("2024-05-01", "I love skiing in Trysil."),
        ("2024-06-01", "My favourite band is a-ha."),
        ("2024-07-01", "My favourite season is winter."),
        ("2024-08-01", "We went to Stockholm in July."),
        q=("2024-09-01", "Where do I live and work?"),
        current="live in Oslo",
        keep=("Oslo", "Bergen", "Equinor", "hospital", "Trysil", "a-ha", "winter", "Stockholm"),
        split="held_out",
    ),
    # LoCoMo conv-41 (John): the earlier state and the change, in his own words and dates.
    _s(
        "locomo-john-job",
        ("2023-06-16", "I got promoted at work! It's been a loooong time coming."),
        (
            "2023-08-05",
            "Crazy thing happened since we last talked. I lost my job at the mechanical "
            "engineering company. They tanked and I got laid off.",
        ),
        q=("2023-08-20", "Does John still work at the mechanical engineering company?"),
        current="lost my job",
        old="promoted at work",
        speaker="John",
        split="held_out",
    ),
    # LoCoMo conv-30 (Gina): she lost her Door Dash job, then opened her own store.
    _s(
        "locomo-gina-store",
        ("2023-01-20", "Unfortunately, I also lost my job at Door Dash this month."),
        (
            "2023-06-16",
            "I've been one 'cause I lost my job. I opened an online clothing store and it's "
            "been great! Being my own boss and doing something I love.",
        ),
        q=("2023-07-01", "What does Gina do for work now?"),
        current="online clothing store",
        old="Door Dash this month",
        speaker="Gina",
        split="held_out",
    ),
)

# Written after the rules were changed once more (commit 8f12fcd, which read the first
# held-out set's misses): a second set no rule was written from. Never tuned on.
HELD_OUT_2: tuple[Scenario, ...] = (
    _s(
        "h2-flat",
        ("2024-11-11", "I live in Glasgow, top floor, lots of stairs."),
        ("2025-05-30", "Finally moved to Edinburgh! The new flat has a lift."),
        q=("2025-06-30", "Where do I live?"),
        current="Edinburgh",
        old="lots of stairs",
        split="held_out_2",
    ),
    _s(
        "h2-country",
        ("2024-03-03", "We live in Chile, in a town near Valparaiso."),
        ("2025-03-03", "We're living in Peru now, Lima is huge."),
        q=("2025-04-04", "Which country do we live in?"),
        current="Peru",
        old="Valparaiso",
        split="held_out_2",
    ),
    _s(
        "h2-employer",
        ("2024-07-07", "I work for a small bakery on Elm Street."),
        ("2025-01-08", "I started working at the hospital cafeteria this week."),
        q=("2025-02-08", "Where do I work?"),
        current="cafeteria",
        old="bakery",
        split="held_out_2",
    ),
    _s(
        "h2-hired",
        ("2024-02-02", "I'm working at Contoso on the payroll app."),
        ("2024-09-15", "Got hired by Fabrikam, I start in October."),
        q=("2024-10-20", "Who do I work for?"),
        current="Fabrikam",
        old="payroll app",
        split="held_out_2",
    ),
    _s(
        "h2-puppy",
        ("2025-01-01", "My puppy's name is Pepper."),
        ("2025-03-01", "We renamed the puppy, my puppy's name is Mochi now."),
        q=("2025-04-01", "What's my puppy called?"),
        current="Mochi",
        old="is Pepper.",
        split="held_out_2",
    ),
    _s(
        "h2-husband",
        ("2023-05-05", "My husband is Daniel, he teaches chemistry."),
        ("2025-02-14", "We got divorced last year. It was the right call."),
        q=("2025-03-14", "Am I married?"),
        current="divorced",
        old="teaches chemistry",
        split="held_out_2",
    ),
    _s(
        "h2-fav-colour",
        ("2024-01-01", "My favourite colour is purple."),
        ("2025-01-01", "My favourite colour is now teal, purple is over."),
        q=("2025-02-01", "What's my favourite colour?"),
        current="teal",
        old="is purple.",
        split="held_out_2",
    ),
    _s(
        "h2-diet",
        ("2024-06-01", "I eat everything, no restrictions."),
        ("2025-01-02", "I switched to a vegan diet for the new year."),
        q=("2025-02-02", "What diet am I on?"),
        current="vegan",
        old="no restrictions",
        split="held_out_2",
    ),
    _s(
        "h2-no-longer-live",
        ("2024-04-04", "I live in Cork with my parents."),
        ("2025-04-04", "I no longer live in Cork, I have my own place in Dublin."),
        q=("2025-05-05", "Do I still live with my parents in Cork?"),
        current="no longer live",
        old="with my parents",
        split="held_out_2",
    ),
    _s(
        "h2-surgery",
        ("2025-02-01", "My surgery is on March 3."),
        ("2025-02-20", "My surgery was moved to March 17, the surgeon is away."),
        q=("2025-02-25", "When is my surgery?"),
        current="March 17",
        old="March 3.",
        split="held_out_2",
    ),
    _s(
        "h2-left-job",
        ("2024-01-20", "I work at Northwind as an accountant."),
        ("2024-12-20", "I left Northwind last week, freelancing from now on."),
        q=("2025-01-20", "Where do I work?"),
        current="left Northwind",
        old="as an accountant",
        split="held_out_2",
    ),
    _s(
        "h2-conflict-dog",
        ("2025-08-08", "My dog's name is Bruno."),
        ("2025-08-08", "My dog's name is Bingo."),
        q=("2025-08-09", "What's my dog's name?"),
        current="Bingo",
        old="Bruno",
        conflict=True,
        split="held_out_2",
    ),
    _s(
        "h2-unrelated",
        ("2024-01-01", "I live in Nairobi."),
        ("2024-02-01", "My mother lives in Mombasa."),
        ("2024-03-01", "I work at Safaricom."),
        ("2024-04-01", "My cousin works at a bank in Kisumu."),
        ("2024-05-01", "My favourite dish is pilau."),
        ("2024-06-01", "My favourite team is Gor Mahia."),
        ("2024-07-01", "My cat's name is Simba."),
        ("2024-08-01", "My dog's name is Rafiki."),
        ("2024-09-01", "We travelled to Lamu in August."),
        q=("2024-10-01", "Tell me about where I live and my pets."),
        current="live in Nairobi",
        keep=(
            "Nairobi",
            "Mombasa",
            "Safaricom",
            "Kisumu",
            "pilau",
            "Gor Mahia",
            "Simba",
            "Rafiki",
            "Lamu",
        ),
        split="held_out_2",
    ),
)

SCENARIOS: tuple[Scenario, ...] = TUNED + HELD_OUT + HELD_OUT_2
