"""A third held-out set of ``agentgw bench trust``: jobs, roles and other life statuses.

Written and committed before any rule for them (issue 22's last dev miss is
LoCoMo's John: "I got promoted at work!", later "I lost my job", where the
promotion is an event that says he holds a job, and no slot or frame holds it).
A miss here is reported, not fixed by a rule written from it.

Three kinds:

- job and role changes said as events or statuses (promotions, a new title, "I'm
  the manager now", quitting, being laid off, fired, made redundant, retiring,
  going freelance, a new job), with the earlier state in everyday words;
- status changes in other domains (studies, relationships, diet, smoking, a car
  sold, a pet that died, leaving the parents' home);
- distractors: the same verbs about someone else or something else ("my sister
  got promoted", "I quit sugar", "they laid off half my team", "I moved to
  Firefox"), which end nothing: ``keep`` lists words of statements that must
  stay valid.

``current`` and ``old`` are words only in the statement true now and in the one
it replaced, as in gateway/bench/trust_scenarios.py.
"""

from __future__ import annotations

from gateway.bench.trust_scenarios import Scenario, _s

SPLIT = "held_out_3"

JOBS: tuple[Scenario, ...] = (
    _s(
        "h3-promoted-manager",
        ("2024-09-10", "I'm a backend developer on the payments team."),
        ("2025-03-12", "I got promoted! I'm now an engineering manager with five reports."),
        q=("2025-04-01", "What's my role at work?"),
        current="engineering manager",
        old="backend developer",
        split=SPLIT,
    ),
    _s(
        "h3-title",
        ("2024-06-01", "I work as a paralegal at a small firm in Leeds."),
        ("2025-01-20", "Passed the exams, so my title is now associate solicitor."),
        q=("2025-02-01", "What's my job title?"),
        current="associate solicitor",
        old="paralegal",
        split=SPLIT,
    ),
    _s(
        "h3-now-the-manager",
        ("2024-11-05", "I'm a shift supervisor at the warehouse."),
        ("2025-05-05", "I'm the operations manager now, they gave me the whole site."),
        q=("2025-06-01", "What is my job at the warehouse?"),
        current="operations manager",
        old="shift supervisor",
        split=SPLIT,
    ),
    _s(
        "h3-quit",
        ("2024-03-03", "I work at Deloitte in the audit team."),
        ("2024-10-10", "I quit my job last Friday, I couldn't take the hours any more."),
        q=("2024-11-01", "Am I still at Deloitte?"),
        current="quit my job",
        old="Deloitte in the audit",
        split=SPLIT,
    ),
    _s(
        "h3-laid-off",
        ("2024-02-14", "I've been a product designer at Spotify for three years."),
        ("2024-12-02", "Bad news, I got laid off this morning along with half the design team."),
        q=("2024-12-20", "Where do I work?"),
        current="laid off",
        old="product designer at Spotify",
        split=SPLIT,
    ),
    _s(
        "h3-new-job",
        ("2024-04-20", "I'm a nurse at St Mary's, nights mostly."),
        ("2025-02-01", "I started a new job at a GP surgery in Hackney, no more night shifts!"),
        q=("2025-03-01", "Where do I work these days?"),
        current="GP surgery",
        old="St Mary's",
        split=SPLIT,
    ),
    _s(
        "h3-fired",
        ("2024-01-10", "I'm a barista at the Blue Bottle on Market Street."),
        ("2024-06-15", "Got fired today for being late three times. Great."),
        q=("2024-07-01", "Where do I work?"),
        current="Got fired",
        old="barista at the Blue Bottle",
        split=SPLIT,
    ),
    _s(
        "h3-made-lead-then-redundant",
        ("2024-03-03", "They finally made me team lead, it's official!"),
        ("2024-11-11", "I was made redundant on Friday, the whole office is closing."),
        q=("2024-12-01", "Do I still have a job?"),
        current="made redundant",
        old="made me team lead",
        split=SPLIT,
    ),
    _s(
        "h3-retired",
        ("2023-09-01", "I teach maths at Hillside Secondary."),
        ("2025-07-20", "I retired in July after thirty years of teaching."),
        q=("2025-08-20", "Do I still teach?"),
        current="retired in July",
        old="maths at Hillside",
        split=SPLIT,
    ),
    _s(
        "h3-freelance",
        ("2024-01-15", "I work for an ad agency in Shoreditch."),
        ("2024-08-01", "I went freelance in the summer, best decision ever."),
        q=("2024-09-01", "Who do I work for?"),
        current="went freelance",
        old="ad agency in Shoreditch",
        split=SPLIT,
    ),
    _s(
        "h3-between-jobs",
        ("2024-02-01", "I work for the council in the planning department."),
        ("2024-09-01", "I'm between jobs right now, applying everywhere."),
        q=("2024-09-20", "Where do I work?"),
        current="between jobs",
        old="council in the planning",
        split=SPLIT,
    ),
)

STATUSES: tuple[Scenario, ...] = (
    _s(
        "h3-graduated",
        ("2023-10-01", "I'm a second-year student at Edinburgh, doing geography."),
        ("2025-06-30", "I graduated last week! First class honours."),
        q=("2025-08-01", "Am I still at university?"),
        current="graduated last week",
        old="second-year student",
        split=SPLIT,
    ),
    _s(
        "h3-single",
        ("2024-02-02", "I'm seeing a guy called Tom, it's going well."),
        ("2024-09-09", "I'm single again, Tom and I ended things in August."),
        q=("2024-10-01", "Am I seeing anyone?"),
        current="single again",
        old="guy called Tom",
        split=SPLIT,
    ),
    _s(
        "h3-vegan",
        ("2024-05-05", "I'm vegetarian, have been since uni."),
        ("2025-02-02", "I went fully vegan in January."),
        q=("2025-03-01", "What's my diet?"),
        current="fully vegan",
        old="vegetarian, have",
        split=SPLIT,
    ),
    _s(
        "h3-smoking",
        ("2024-01-01", "I smoke about ten a day, I know, I know."),
        ("2024-08-08", "I quit smoking in March and haven't had one since."),
        q=("2024-09-01", "Do I smoke?"),
        current="quit smoking",
        old="ten a day",
        split=SPLIT,
    ),
    _s(
        "h3-car-sold",
        ("2024-04-04", "I have a 2015 Golf, it's been reliable."),
        ("2025-01-11", "I sold the Golf, I just take the train now."),
        q=("2025-02-01", "What car do I have?"),
        current="sold the Golf",
        old="2015 Golf, it's",
        split=SPLIT,
    ),
    _s(
        "h3-pet-died",
        ("2024-01-01", "We have a cat called Miso, she's twelve."),
        ("2024-11-20", "Miso passed away last night, the house feels empty."),
        q=("2024-12-01", "Do I have any pets?"),
        current="passed away",
        old="cat called Miso",
        split=SPLIT,
    ),
    _s(
        "h3-own-flat",
        ("2024-03-01", "I live with my parents in Croydon for now."),
        ("2024-10-01", "I finally got my own flat in Brixton!"),
        q=("2024-11-01", "Where do I live?"),
        current="flat in Brixton",
        old="parents in Croydon",
        split=SPLIT,
    ),
)

DISTRACTORS: tuple[Scenario, ...] = (
    _s(
        "h3-not-sister-promoted",
        ("2025-01-01", "I work as a nurse at St Thomas' Hospital."),
        ("2025-02-01", "My sister got promoted to head of marketing!"),
        q=("2025-03-01", "What do I do for work?"),
        keep=("nurse at St Thomas'",),
        split=SPLIT,
    ),
    _s(
        "h3-not-quit-sugar",
        ("2025-01-01", "I work at the library on weekdays."),
        ("2025-03-01", "I quit sugar for Lent, it's brutal."),
        q=("2025-03-20", "Where do I work?"),
        keep=("library on weekdays",),
        split=SPLIT,
    ),
    _s(
        "h3-not-team-laid-off",
        ("2025-01-01", "I'm an accountant at KPMG."),
        ("2025-02-01", "They laid off half my team today, I survived though."),
        q=("2025-03-01", "Where do I work?"),
        keep=("accountant at KPMG",),
        split=SPLIT,
    ),
    _s(
        "h3-not-started-class",
        ("2025-01-01", "I work at Ikea in Wembley."),
        ("2025-02-01", "I started a pottery class at the community centre."),
        q=("2025-03-01", "Where do I work?"),
        keep=("Ikea in Wembley",),
        split=SPLIT,
    ),
    _s(
        "h3-not-hoping",
        ("2025-01-01", "I'm a junior developer at Monzo."),
        ("2025-02-01", "I'm hoping to get promoted in the spring."),
        q=("2025-03-01", "What's my job?"),
        keep=("junior developer at Monzo",),
        split=SPLIT,
    ),
    _s(
        "h3-not-old-graduation",
        ("2025-01-01", "I work as a vet in Bristol."),
        ("2025-02-01", "I graduated from Glasgow back in 2015, it feels like forever."),
        q=("2025-03-01", "What do I do?"),
        keep=("vet in Bristol",),
        split=SPLIT,
    ),
    _s(
        "h3-not-volunteer",
        ("2025-01-01", "I work as a data analyst at the NHS."),
        ("2025-02-01", "I also became a volunteer at the food bank this spring."),
        q=("2025-03-01", "What do I do?"),
        keep=("data analyst at the NHS",),
        split=SPLIT,
    ),
    _s(
        "h3-not-member",
        ("2025-01-01", "I'm a teacher at Oakfield Primary."),
        ("2025-02-01", "I'm now a member of the local climbing club."),
        q=("2025-03-01", "What do I do for work?"),
        keep=("teacher at Oakfield",),
        split=SPLIT,
    ),
    _s(
        "h3-not-sold-bike",
        ("2025-01-01", "I have a Vespa for getting around town."),
        ("2025-02-01", "I sold my old bike on eBay yesterday."),
        q=("2025-03-01", "How do I get around?"),
        keep=("Vespa for getting",),
        split=SPLIT,
    ),
    _s(
        "h3-not-neighbours-cat",
        ("2025-01-01", "We have two dogs, Pepper and Bean."),
        ("2025-02-01", "My neighbour's old cat died last week, so sad."),
        q=("2025-03-01", "What pets do I have?"),
        keep=("Pepper and Bean",),
        split=SPLIT,
    ),
    _s(
        "h3-not-friend-divorced",
        ("2025-01-01", "I'm married, two kids."),
        ("2025-02-01", "My best friend just got divorced."),
        q=("2025-03-01", "Am I married?"),
        keep=("married, two kids",),
        split=SPLIT,
    ),
    _s(
        "h3-not-moved-to-firefox",
        ("2025-01-01", "I live in Leeds, near the university."),
        ("2025-02-01", "I've moved to Firefox since Chrome got so slow."),
        q=("2025-03-01", "Where do I live?"),
        keep=("Leeds, near",),
        split=SPLIT,
    ),
    _s(
        "h3-not-four-day-week",
        ("2025-01-01", "We live in Bath, in a flat by the river."),
        ("2025-02-01", "We moved to a four-day week at work, it's great."),
        q=("2025-03-01", "Where do we live?"),
        keep=("Bath, in a flat",),
        split=SPLIT,
    ),
)

HELD_OUT_STATUS: tuple[Scenario, ...] = JOBS + STATUSES + DISTRACTORS
