"""A second lockbox set of ``agentgw bench trust``: written blind, run once.

Written on 2026-11-28 by a helper session (branch h/lockbox2) that did not open
the slot, status, frame, validity or trust-pass rules (memory/slots.py,
statuses.py, trust.py, validity.py, frames.py) nor the design notes about them,
and did not run the bench on these scenarios, while another engineer changed
those rules without seeing this set. Only the Scenario format and the other sets'
shapes were read; the people, places and wordings are new. Its first run after
the rules are frozen is its figure; after that it is no longer blind and must
not be tuned on.

Changes (``current`` and ``old``: words only in the statement true now and in
the one it replaced) are grouped by slot kind: where the person lives, their
employer, their role, their partner, a pet's name, a child's name, a favourite,
a plan's date, a switch of tool / phone / diet, and things that ended. Keeps
(``keep``: words of a statement that must stay valid) are later statements that
end nothing: about someone else, about the past, a visit, a hypothetical, a
second hobby, another plan, the same verb about something else.
"""

from __future__ import annotations

from gateway.bench.trust_scenarios import Scenario, _s

SPLIT = "lockbox_2"

HOME: tuple[Scenario, ...] = (
    _s(
        "lb2-home-settled",
        (
            "2024-03-02",
            "We rent a tiny flat in Graz, fourth floor, no lift, my calves are huge lol",
        ),
        ("2024-06-11", "Made pierogi from my gran's recipe tonight, total disaster."),
        ("2025-01-19", "Finally settled in Ljubljana after the move, office is 10 min on foot."),
        q=("2025-03-01", "which city am I based in right now?"),
        current="settled in Ljubljana",
        old="flat in Graz",
        speaker="Tomasz",
        split=SPLIT,
    ),
    _s(
        "lb2-home-subordinate",
        ("2023-09-10", "I'm in Nottingham, Sneinton area, shared house with three nurses."),
        (
            "2024-06-22",
            "Since we relocated to Sheffield the rent's way lower, but I do miss the pub quiz.",
        ),
        q=("2024-08-01", "Where am I living these days?"),
        current="relocated to Sheffield",
        old="Sneinton area",
        speaker="Imogen",
        split=SPLIT,
    ),
    _s(
        "lb2-home-keys",
        ("2024-01-07", "home is Tauranga for now, right by the beach"),
        ("2024-10-30", "moving day!! keys to the new place in Wellington are finally mine"),
        q=("2024-12-05", "Remind me where I live?"),
        current="new place in Wellington",
        old="home is Tauranga",
        speaker="Aroha",
        split=SPLIT,
    ),
    _s(
        "lb2-home-moved-out",
        ("2023-05-14", "Still at my mum and dad's in Gdansk while I save up for a deposit."),
        ("2024-02-11", "Moved out at last, got my own studio in Sopot!"),
        q=("2024-03-20", "Do I still live with my parents?"),
        current="own studio in Sopot",
        old="mum and dad's in Gdansk",
        speaker="Wiktor",
        split=SPLIT,
    ),
)

WORK: tuple[Scenario, ...] = (
    _s(
        "lb2-work-first-week",
        ("2023-11-02", "I'm at Siemens Healthineers, writing firmware for MRI scanners."),
        (
            "2024-07-15",
            "First week at Philips done, onboarding was a blur but the team seems nice.",
        ),
        q=("2024-08-10", "Which company do I work for?"),
        current="First week at Philips",
        old="at Siemens Healthineers",
        speaker="Henrik",
        split=SPLIT,
    ),
    _s(
        "lb2-work-subordinate",
        ("2024-02-20", "I do admin at the county court, pretty boring but stable."),
        (
            "2024-11-04",
            "Ever since I took the job at the Shelter helpline things have been hectic, "
            "but it feels way more meaningful.",
        ),
        q=("2024-12-01", "Who's my employer?"),
        current="job at the Shelter helpline",
        old="admin at the county court",
        speaker="Zainab",
        split=SPLIT,
    ),
    _s(
        "lb2-work-left",
        ("2024-05-05", "Been a barista at Ozone since spring."),
        ("2024-09-14", "agent: How's the coffee scene treating you?"),
        ("2025-02-02", "left Ozone, I'm pulling shots at Workshop Coffee now, way better tips"),
        q=("2025-03-03", "where do I work?"),
        current="shots at Workshop Coffee",
        old="barista at Ozone",
        speaker="Lupe",
        split=SPLIT,
    ),
    _s(
        "lb2-work-signed",
        ("2023-08-08", "I'm a site engineer with Costain on the Crossrail job."),
        (
            "2024-04-18",
            "Signed with Balfour Beatty last month, starting on their HS2 site after Easter.",
        ),
        q=("2024-06-01", "Which firm am I with?"),
        current="Signed with Balfour Beatty",
        old="engineer with Costain",
        speaker="Declan",
        split=SPLIT,
    ),
)

ROLE: tuple[Scenario, ...] = (
    _s(
        "lb2-role-senior",
        ("2024-01-15", "I'm a junior associate at a law firm in Aberdeen, mostly conveyancing."),
        ("2024-12-12", "They made me senior associate today!! drinks on me"),
        q=("2025-01-10", "What's my title at the firm?"),
        current="senior associate today",
        old="junior associate",
        speaker="Ruairi",
        split=SPLIT,
    ),
    _s(
        "lb2-role-ward-sister",
        ("2023-10-01", "I'm a staff nurse on a cardiac ward, mostly nights."),
        (
            "2024-09-09",
            "Got the ward sister job, so now I'm the one doing the rota "
            "instead of moaning about it.",
        ),
        q=("2024-10-01", "What's my role at the hospital?"),
        current="ward sister job",
        old="staff nurse",
        speaker="Ama",
        split=SPLIT,
    ),
    _s(
        "lb2-role-sideways",
        ("2024-03-03", "I'm a product designer, mostly mobile apps."),
        (
            "2024-10-21",
            "I moved over to the research team, so I'm a UX researcher now "
            "rather than pushing pixels.",
        ),
        q=("2024-11-30", "What do I do for a living?"),
        current="UX researcher now",
        old="product designer",
        speaker="Yuki",
        split=SPLIT,
    ),
    _s(
        "lb2-role-qualified",
        ("2023-06-06", "Work-wise I'm a teaching assistant in a Year 2 class."),
        ("2024-09-02", "Qualified at last - I've got my own Year 4 class this September."),
        q=("2024-10-10", "Am I still a teaching assistant?"),
        current="own Year 4 class",
        old="teaching assistant in a Year 2",
        speaker="Greta",
        split=SPLIT,
    ),
)

PARTNER: tuple[Scenario, ...] = (
    _s(
        "lb2-partner-broke-up",
        ("2024-02-14", "My girlfriend Leonie booked us a cabin for Valentine's, I'm spoiled."),
        ("2024-08-03", "Leonie and I broke up in July. Mutual, but still rough."),
        q=("2024-09-01", "Am I seeing anyone?"),
        current="broke up in July",
        old="girlfriend Leonie",
        speaker="Oskar",
        split=SPLIT,
    ),
    _s(
        "lb2-partner-new",
        ("2023-12-01", "I've been dating Kwame for about six months now."),
        ("2024-03-10", "Things fizzled out with Kwame, no drama."),
        (
            "2024-11-11",
            "my boyfriend Tunde is cooking jollof for my parents tonight, wish him luck",
        ),
        q=("2024-12-01", "What's my boyfriend's name?"),
        current="boyfriend Tunde",
        old="dating Kwame",
        speaker="Ife",
        split=SPLIT,
    ),
    _s(
        "lb2-partner-divorce",
        ("2023-01-20", "My wife Carla and I have been married twelve years this spring."),
        (
            "2024-05-30",
            "Now that the divorce from Carla is final I'm trying to learn to cook for one.",
        ),
        q=("2024-07-01", "Am I married?"),
        current="divorce from Carla is final",
        old="wife Carla",
        speaker="Mateo",
        split=SPLIT,
    ),
)

PET: tuple[Scenario, ...] = (
    _s(
        "lb2-pet-renamed",
        ("2024-04-01", "Our kitten is called Noodle for now, the kids are still arguing about it."),
        ("2024-04-20", "Final answer on the kitten: she's Juniper. Noodle got outvoted."),
        q=("2024-06-01", "What's our kitten's name?"),
        current="she's Juniper",
        old="called Noodle",
        speaker="Kofi",
        split=SPLIT,
    ),
    _s(
        "lb2-pet-rehomed",
        ("2023-03-03", "Walked Bramble, my old lab, along the canal this morning."),
        (
            "2024-06-08",
            "We had to rehome Bramble when we moved into the flat (no dogs allowed), "
            "so now it's just Clover the rabbit.",
        ),
        q=("2024-07-01", "What pet do I have?"),
        current="Clover the rabbit",
        old="Bramble, my old lab",
        speaker="Freya",
        split=SPLIT,
    ),
)

CHILD: tuple[Scenario, ...] = (
    _s(
        "lb2-child-named",
        ("2024-02-05", "We've settled on a name for the baby: Isla."),
        ("2024-05-28", "She's here! In the end we called her Aoife, Isla just didn't suit her."),
        q=("2024-07-01", "What's my daughter's name?"),
        current="called her Aoife",
        old="name for the baby: Isla",
        speaker="Saoirse",
        split=SPLIT,
    ),
    _s(
        "lb2-child-goes-by",
        ("2023-09-01", "My eldest, Alexandra, starts secondary school next week."),
        ("2024-06-15", "Quick heads up, my eldest goes by Sasha now, please use that name."),
        q=("2024-07-01", "What's my eldest called?"),
        current="goes by Sasha now",
        old="eldest, Alexandra",
        speaker="Teodor",
        split=SPLIT,
    ),
)

FAVOURITE: tuple[Scenario, ...] = (
    _s(
        "lb2-fav-food",
        ("2024-01-09", "My favourite food is pho, I could eat it every single day."),
        ("2024-11-02", "Honestly bibimbap has overtaken pho as my number one comfort food."),
        q=("2024-12-10", "What's my favourite food?"),
        current="bibimbap has overtaken",
        old="favourite food is pho",
        speaker="Mei",
        split=SPLIT,
    ),
    _s(
        "lb2-fav-film",
        ("2023-11-18", "Best film ever made? Heat. Not even close."),
        (
            "2024-10-05",
            "ok after rewatching it I think The Handmaiden is my all-time favourite now, "
            "sorry Heat",
        ),
        q=("2024-11-01", "What's my favourite film?"),
        current="The Handmaiden is my all-time",
        old="Best film ever made? Heat",
        speaker="Paulo",
        split=SPLIT,
    ),
    _s(
        "lb2-fav-team",
        ("2023-07-07", "Big Mercedes fan in F1, Lewis is the GOAT."),
        (
            "2024-09-15",
            "I've properly switched allegiance to McLaren this season, Lando's driving is unreal.",
        ),
        q=("2024-10-20", "Which F1 team do I support?"),
        current="switched allegiance to McLaren",
        old="Big Mercedes fan",
        speaker="Hamza",
        split=SPLIT,
    ),
    _s(
        "lb2-fav-band",
        ("2024-02-02", "My favourite band at the moment is Fontaines D.C."),
        ("2024-08-30", "been obsessed with Wet Leg all summer, they're my favourite band now"),
        q=("2024-09-15", "What's my favourite band?"),
        current="Wet Leg all summer",
        old="Fontaines D.C.",
        speaker="Astrid",
        split=SPLIT,
    ),
)

PLAN: tuple[Scenario, ...] = (
    _s(
        "lb2-plan-housewarming",
        ("2024-08-10", "Our housewarming is on Saturday 21 September, bring a bottle!"),
        ("2024-08-24", "Painted the hallway sage green, looks class."),
        (
            "2024-09-03",
            "Housewarming's been bumped to the 28th, half our mates are at a stag do that weekend.",
        ),
        q=("2024-09-10", "When's our housewarming?"),
        current="bumped to the 28th",
        old="Saturday 21 September",
        speaker="Noor",
        split=SPLIT,
    ),
    _s(
        "lb2-plan-driving-test",
        ("2025-01-06", "My driving test is on 3 February, I'm terrified."),
        ("2025-01-29", "They cancelled my test because of the snow, new date is 24 February."),
        q=("2025-02-05", "When's my driving test?"),
        current="new date is 24 February",
        old="test is on 3 February",
        speaker="Chidi",
        split=SPLIT,
    ),
    _s(
        "lb2-plan-flight",
        ("2024-08-12", "Flying out to Seoul on 18 September for the conference, can't wait."),
        (
            "2024-09-05",
            "The conference got postponed, so I rebooked my flight to Seoul for 2 October.",
        ),
        q=("2024-09-10", "When do I fly to Seoul?"),
        current="rebooked my flight",
        old="on 18 September",
        speaker="Bilal",
        split=SPLIT,
    ),
)

SWITCH: tuple[Scenario, ...] = (
    _s(
        "lb2-switch-phone",
        ("2023-10-10", "I'm on a OnePlus 11, battery's going but it does the job."),
        (
            "2024-12-26",
            "Got a Fairphone 5 for Christmas so I can finally fix my own phone, "
            "the OnePlus is going to my mum.",
        ),
        q=("2025-01-15", "What phone do I use?"),
        current="Got a Fairphone 5",
        old="on a OnePlus 11",
        speaker="Leilani",
        split=SPLIT,
    ),
    _s(
        "lb2-switch-tool",
        ("2024-02-02", "We track all our sprints in Jira at work."),
        ("2024-09-09", "The team ditched Jira for Linear in August and honestly nobody misses it."),
        q=("2024-10-01", "What do we use for sprint tracking?"),
        current="ditched Jira for Linear",
        old="sprints in Jira",
        speaker="Rashid",
        split=SPLIT,
    ),
    _s(
        "lb2-switch-diet",
        ("2024-01-02", "Doing keto this year, zero carbs, day two and dying for toast."),
        ("2024-06-14", "Gave up on keto, I'm doing Mediterranean-style eating now, bread is back."),
        q=("2024-07-01", "What diet am I on?"),
        current="Mediterranean-style eating",
        old="Doing keto",
        speaker="Ingrid",
        split=SPLIT,
    ),
)

ENDED: tuple[Scenario, ...] = (
    _s(
        "lb2-ended-football",
        ("2023-05-01", "I play five-a-side every Tuesday with the lads from work."),
        ("2024-03-20", "I don't play five-a-side anymore since I did my ACL."),
        q=("2024-04-15", "Do I still play football on Tuesdays?"),
        current="anymore since I did my ACL",
        old="every Tuesday with the lads",
        speaker="Callum",
        split=SPLIT,
    ),
    _s(
        "lb2-ended-gym",
        ("2024-02-01", "I've got a membership at Anytime Fitness, I go most mornings before work."),
        ("2024-10-01", "I'm no longer at the gym, cancelled it and I just run outside now."),
        q=("2024-11-01", "Which gym do I go to?"),
        current="no longer at the gym",
        old="membership at Anytime Fitness",
        speaker="Yusuf",
        split=SPLIT,
    ),
    _s(
        "lb2-ended-choir",
        ("2023-09-14", "I sing alto in the Walthamstow community choir, Thursday evenings."),
        ("2024-04-04", "I quit the choir after the director left, Thursdays are free again."),
        q=("2024-05-01", "Am I still in a choir?"),
        current="quit the choir",
        old="alto in the Walthamstow",
        speaker="Delphine",
        split=SPLIT,
    ),
)

KEEPS: tuple[Scenario, ...] = (
    _s(
        "lb2-keep-brother-moved",
        ("2024-03-01", "I live in Haarlem, right by the Grote Markt."),
        ("2024-07-07", "My brother just moved to Rotterdam for his new job."),
        q=("2024-08-01", "Where do I live?"),
        keep=("Haarlem, right by",),
        speaker="Pim",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-past-home",
        ("2024-05-05", "I live in Brighton, five minutes from the seafront."),
        (
            "2024-09-09",
            "Back when I lived in Reading I never thought I'd miss it, but here we are.",
        ),
        q=("2024-10-01", "Where do I live now?"),
        keep=("Brighton, five minutes",),
        speaker="Tara",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-visit",
        ("2024-02-02", "Home is Halifax, Nova Scotia, for about six years now."),
        ("2024-07-15", "Spending three weeks at my sister's in Calgary, so jet-lagged lol"),
        q=("2024-08-20", "Where's home for me?"),
        keep=("Halifax, Nova Scotia",),
        speaker="Marguerite",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-offer-if",
        ("2024-04-04", "I'm an auditor at Mazars, mostly banks and insurers."),
        (
            "2024-06-06",
            "If the Grant Thornton offer comes through I'd probably take it, "
            "but I haven't heard a thing.",
        ),
        q=("2024-07-07", "Where do I work?"),
        keep=("auditor at Mazars",),
        speaker="Nikhil",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-second-hobby",
        ("2024-01-10", "My hobby is bouldering, I go to the wall three times a week."),
        (
            "2024-05-20",
            "I've taken up the cello too, Wednesday night lessons, the neighbours are thrilled.",
        ),
        q=("2024-06-30", "What are my hobbies?"),
        keep=("bouldering, I go to the wall",),
        speaker="Soren",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-husband-job",
        ("2024-02-02", "I'm a shift lead at the Amazon warehouse in Coventry."),
        ("2024-08-08", "My husband started at the JLR plant in Solihull as a supervisor."),
        q=("2024-09-01", "Where do I work?"),
        keep=("Amazon warehouse in Coventry",),
        speaker="Kerry",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-neighbour-puppy",
        ("2024-03-03", "Our tortoiseshell Pickle rules the house, she's nine and grumpy."),
        (
            "2024-04-04",
            "My neighbour's new puppy is called Toast and he's already obsessed with Pickle.",
        ),
        q=("2024-05-05", "What's my cat's name?"),
        keep=("tortoiseshell Pickle",),
        speaker="Hiro",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-wife-favourite",
        ("2024-01-01", "My favourite film is Spirited Away, I rewatch it every winter."),
        (
            "2024-02-14",
            "Watched Titanic with my wife for Valentine's, it's her favourite film. "
            "I cried more than she did.",
        ),
        q=("2024-03-01", "What's my favourite film?"),
        keep=("favourite film is Spirited Away",),
        speaker="Dmitri",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-other-date",
        ("2024-05-01", "My graduation ceremony is on 12 July at the Usher Hall."),
        ("2024-06-01", "Also booked a dentist check-up for 3 July, thrilling stuff."),
        q=("2024-06-20", "When's my graduation?"),
        keep=("graduation ceremony is on 12 July",),
        speaker="Eilidh",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-switched-energy",
        ("2024-02-02", "I use a Samsung Galaxy S23, love the screen on it."),
        ("2024-06-06", "I switched energy supplier to Octopus, already saving a bit."),
        q=("2024-07-01", "What phone do I have?"),
        keep=("Samsung Galaxy S23",),
        speaker="Gethin",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-diet-considered",
        ("2024-01-15", "I've been vegan for three years now."),
        (
            "2024-04-04",
            "My GP asked if I'd consider adding fish back in for the omega-3s, "
            "told her I'd think about it.",
        ),
        q=("2024-05-05", "Am I vegan?"),
        keep=("vegan for three years",),
        speaker="Sunniva",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-mate-broke-up",
        ("2024-02-20", "My girlfriend Hana and I just signed for a flat together in Leith."),
        ("2024-09-09", "My best mate Ross and his girlfriend broke up, he's sleeping on our sofa."),
        q=("2024-10-01", "Who's my girlfriend?"),
        keep=("girlfriend Hana",),
        speaker="Fraser",
        split=SPLIT,
    ),
    _s(
        "lb2-keep-no-longer-pasta",
        ("2024-02-02", "I work at Waitrose on the deli counter."),
        ("2024-05-05", "The deli no longer does fresh pasta and the customers are fuming."),
        q=("2024-06-01", "Where do I work?"),
        keep=("Waitrose on the deli",),
        speaker="Bev",
        split=SPLIT,
    ),
)

CHANGES: tuple[Scenario, ...] = (
    HOME + WORK + ROLE + PARTNER + PET + CHILD + FAVOURITE + PLAN + SWITCH + ENDED
)

LOCKBOX_2: tuple[Scenario, ...] = CHANGES + KEEPS
