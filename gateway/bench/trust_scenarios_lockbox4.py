"""A fourth lockbox set of ``agentgw bench trust``: written blind, run once.

Written on 2026-11-28 by a helper session (branch h/lockbox4) that did not open
the slot, change, status, role, frame, validity or trust-pass rules (memory/slots.py,
changes.py, statuses.py, roles.py, trust.py, validity*.py, frames*.py) nor the
design notes about them, while another engineer was changing those rules without
seeing this set. Only the Scenario format, two of lockbox_3's scenarios for the
shape, and the bench's scoring were read; the people, places, brands and wordings
are the writer's own. It was run once on main's rules at bf99360 to check that it
loads and scores (the figure is in the commit that added it); its next run, after
the rules are frozen, is its blind figure, and after that it is dev.

Changes (``current`` and ``old``: words only in the statement true now and in the
one it replaced) are grouped by slot kind: home, employer, job title, partner,
pet, child, favourite, a plan's date, a tool or product, diet and habits, and
other things people change (surname, email, what they are learning, being
engaged). The old fact is said weeks or months before; the change is said the way
people say it in passing: indirectly ("the lease ran out, we're in … now"), in the
middle of a message about something else, in several Englishes, with or without
the old value, sometimes after the agent repeated the old fact. Keeps (``keep``:
words of a statement that must stay valid) are later statements that end nothing:
another person's change, a question, a hypothetical, an addition, a visit, the
past, an offer turned down, a rumour denied, and a change of another thing of the
same kind.

``Scenario`` has no mark for a time-scoped question ("where did I live last
year?"), so every question here asks about now.
"""

from __future__ import annotations

from gateway.bench.trust_scenarios import Scenario, _s

SPLIT = "lockbox_4"

HOME: tuple[Scenario, ...] = (
    _s(
        "lb4-home-lease-up",
        ("2025-03-04", "Our flat's in Leith, top floor, no lift, which keeps me fit I suppose."),
        ("2025-05-10", "Any tips for getting red wine out of a carpet?"),
        (
            "2025-08-22",
            "The lease on the Leith place was up at the end of July so we're in "
            "Stockbridge now. Ground floor, thank god.",
        ),
        q=("2025-09-15", "Where am I living at the moment?"),
        current="we're in Stockbridge now",
        old="top floor, no lift",
        speaker="Euan",
        split=SPLIT,
    ),
    _s(
        "lb4-home-back-to-mam",
        (
            "2025-01-20",
            "I'm living in Galway city, just off Shop Street, sharing with two nurses.",
        ),
        ("2025-01-20", "agent: Galway's a great spot, you must never be short of music."),
        ("2025-04-02", "My brother's after buying a house in Athlone, fair play to him."),
        (
            "2025-06-30",
            "Moved back home to Sligo to mind Mam after her hip op, so I'm in my old "
            "bedroom again, posters and all.",
        ),
        q=("2025-07-28", "Where do I live now?"),
        current="Moved back home to Sligo",
        old="living in Galway city",
        speaker="Siobhan",
        split=SPLIT,
    ),
    _s(
        "lb4-home-relocated",
        ("2025-02-11", "I live in Tucson, it's 104 out today and I'm melting."),
        ("2025-02-11", "agent: Stay hydrated out there in the Arizona heat!"),
        ("2025-03-30", "My sister in Phoenix keeps sending me pool pics to rub it in."),
        (
            "2025-07-09",
            "Work relocated me, so I've been in Minneapolis since June. Ask me about the "
            "heat again in January lol",
        ),
        q=("2025-08-01", "Which city do I live in?"),
        current="in Minneapolis since June",
        old="live in Tucson",
        speaker="Marisol",
        split=SPLIT,
    ),
    _s(
        "lb4-home-address-mid-message",
        (
            "2025-04-02",
            "Our address is 14 Harbour Lane, Whitstable, if you need it for the invite list.",
        ),
        ("2025-06-14", "The caterer wants numbers by the end of the month."),
        (
            "2025-10-12",
            "Quick one, can you remind me what I said about the caterer? Oh and we've sold "
            "up, the new address is 3 Mill Cottages, Faversham. Still need a present for "
            "Tom's birthday too.",
        ),
        q=("2025-11-02", "What's my home address?"),
        current="3 Mill Cottages, Faversham",
        old="14 Harbour Lane",
        speaker="Harriet",
        split=SPLIT,
    ),
    _s(
        "lb4-home-sunshine-coast",
        ("2025-03-10", "We're out in Ipswich, about forty minutes from Brissie."),
        ("2025-06-21", "Footy's on at the Gabba tonight, can't wait."),
        (
            "2025-11-02",
            "Finally got out of Ipswich! Bought a place on the Sunshine Coast, Caloundra, "
            "and the drive to work is the only downside.",
        ),
        q=("2025-11-20", "Where do I live?"),
        current="place on the Sunshine Coast",
        old="out in Ipswich",
        speaker="Brodie",
        split=SPLIT,
    ),
    _s(
        "lb4-home-second-year",
        ("2025-09-20", "Moved into halls at Exeter, block C, my room is tiny."),
        ("2026-02-14", "Exams went fine, I think, fingers crossed."),
        (
            "2026-09-25",
            "Second year now, so we've got a student house on Pennsylvania Road with four "
            "mates. The boiler is already making noises.",
        ),
        q=("2026-10-05", "Where am I living this term?"),
        current="student house on Pennsylvania Road",
        old="into halls at Exeter",
        speaker="Kofi",
        split=SPLIT,
    ),
)

WORK: tuple[Scenario, ...] = (
    _s(
        "lb4-work-notice",
        ("2025-02-03", "I'm a backend dev at Monzo, mostly payments stuff."),
        ("2025-04-17", "Standup ran forty minutes today, I could scream."),
        (
            "2025-06-12",
            "Handed in my notice a month ago, and Monday I start at Starling. Same sort of "
            "work, better commute.",
        ),
        q=("2025-07-01", "Which company am I working for now?"),
        current="Monday I start at Starling",
        old="backend dev at Monzo",
        speaker="Tariq",
        split=SPLIT,
    ),
    _s(
        "lb4-work-left-the-nhs",
        ("2025-01-14", "I'm on the wards at St James's in Leeds, nights this month."),
        ("2025-01-14", "agent: Nights are brutal, look after yourself between shifts."),
        (
            "2025-05-28",
            "Left the NHS in April. I'm with a private clinic in Harrogate now and "
            "honestly my back thanks me.",
        ),
        q=("2025-06-20", "Where do I work these days?"),
        current="private clinic in Harrogate",
        old="wards at St James's",
        speaker="Bernie",
        split=SPLIT,
    ),
    _s(
        "lb4-work-bought-out",
        ("2025-03-01", "I work for a small design agency called Pixelhaus."),
        ("2025-05-05", "Our office dog ate a whole croissant off my desk today."),
        (
            "2025-08-15",
            "Pixelhaus got bought out over the summer, so technically I'm an Accenture "
            "employee now, which is weird to say.",
        ),
        q=("2025-09-10", "Who's my employer?"),
        current="technically I'm an Accenture employee now",
        old="small design agency called Pixelhaus",
        speaker="Lotte",
        split=SPLIT,
    ),
    _s(
        "lb4-work-resumed",
        ("2025-01-08", "I'm a relationship officer with GTBank, VI branch."),
        ("2025-03-12", "Traffic on Third Mainland Bridge was mad this morning."),
        (
            "2025-07-19",
            "I resumed at Access Bank on Monday, Ikeja branch. Same role but the pay is "
            "better, thank God.",
        ),
        q=("2025-08-04", "Which bank do I work at?"),
        current="resumed at Access Bank",
        old="relationship officer with GTBank",
        speaker="Chiamaka",
        split=SPLIT,
    ),
    _s(
        "lb4-work-new-school",
        ("2025-04-01", "I teach maths at Hillcrest Academy, mostly Year 9 and 10."),
        ("2025-07-22", "Six weeks off, I'm going to sleep for the first three."),
        (
            "2025-09-10",
            "First week at the new place done! Oakfield Secondary is so much better run "
            "than Hillcrest ever was.",
        ),
        q=("2025-10-01", "Which school do I teach at?"),
        current="Oakfield Secondary",
        old="maths at Hillcrest Academy",
        speaker="Grainne",
        split=SPLIT,
    ),
)

TITLE: tuple[Scenario, ...] = (
    _s(
        "lb4-title-senior",
        ("2025-02-02", "I'm a junior analyst on the credit risk team."),
        ("2025-06-06", "My review is next week, nervous."),
        (
            "2025-10-01",
            "Got the promotion!! Senior analyst as of this month, still can't quite believe it.",
        ),
        q=("2025-10-20", "What's my job title?"),
        current="Senior analyst as of this month",
        old="junior analyst on the credit risk team",
        speaker="Wen",
        split=SPLIT,
    ),
    _s(
        "lb4-title-band-seven",
        ("2025-01-15", "I'm a staff nurse on the cardiac ward."),
        ("2025-03-03", "Our ward manager is retiring in the summer."),
        (
            "2025-07-30",
            "Interview went well, I got the band 7 post, so I'm a ward sister now.",
        ),
        q=("2025-08-25", "What's my position on the ward?"),
        current="I'm a ward sister now",
        old="staff nurse on the cardiac ward",
        speaker="Precious",
        split=SPLIT,
    ),
    _s(
        "lb4-title-qualified",
        ("2025-03-12", "I'm a paralegal at a firm in Glasgow, conveyancing mostly."),
        ("2025-08-09", "Studying every night for the last exam, send coffee."),
        (
            "2025-11-20",
            "Passed! Traineeship's done and I'm finally a qualified solicitor.",
        ),
        q=("2025-12-05", "What do I do for a living?"),
        current="finally a qualified solicitor",
        old="paralegal at a firm in Glasgow",
        speaker="Fiona",
        split=SPLIT,
    ),
    _s(
        "lb4-title-stepped-back",
        ("2025-02-14", "I'm the engineering manager for the mobile team, eight reports."),
        ("2025-05-01", "One of my reports is going on parental leave in June."),
        (
            "2025-08-04",
            "I stepped back to an IC role, staff engineer. The management stuff was "
            "grinding me down.",
        ),
        q=("2025-09-01", "What's my role at work?"),
        current="staff engineer",
        old="engineering manager for the mobile team",
        speaker="Dmitri",
        split=SPLIT,
    ),
)

PARTNER: tuple[Scenario, ...] = (
    _s(
        "lb4-partner-someone-new",
        ("2025-01-10", "My boyfriend Callum is taking me to Skye for my birthday."),
        ("2025-01-10", "agent: Skye in winter with Callum sounds magical!"),
        ("2025-04-02", "Callum and I split up in March. It was mutual, mostly."),
        (
            "2025-09-14",
            "I've been seeing someone new, Rhys. He's a firefighter, early days but I "
            "really like him.",
        ),
        q=("2025-10-01", "Who am I going out with?"),
        current="someone new, Rhys",
        old="boyfriend Callum",
        speaker="Eilidh",
        split=SPLIT,
    ),
    _s(
        "lb4-partner-married-again",
        ("2025-03-03", "My husband Dave does all the cooking, I'm useless in the kitchen."),
        ("2025-05-01", "The divorce went through last month. Onwards."),
        (
            "2025-12-01",
            "Married again, would you believe it! Me and Lorraine tied the knot at the "
            "registry office on Saturday.",
        ),
        q=("2025-12-15", "Who am I married to?"),
        current="Me and Lorraine tied the knot",
        old="husband Dave",
        speaker="Pauline",
        split=SPLIT,
    ),
    _s(
        "lb4-partner-named-in-passing",
        ("2025-04-20", "My girlfriend Mei Ling wants to get a cat."),
        ("2025-07-03", "The climbing gym near me has opened a new bouldering wall."),
        (
            "2025-10-18",
            "My girlfriend's name is Aiko by the way, we met at the climbing gym in "
            "August. Me and Mei Ling called it quits back in June.",
        ),
        q=("2025-11-01", "What's my girlfriend called?"),
        current="girlfriend's name is Aiko",
        old="girlfriend Mei Ling",
        speaker="Jonah",
        split=SPLIT,
    ),
)

PET: tuple[Scenario, ...] = (
    _s(
        "lb4-pet-renamed",
        ("2025-02-01", "We adopted a greyhound! The rescue called her Dolly."),
        (
            "2025-02-20",
            "We've renamed the greyhound to Pepper, she never answered to Dolly anyway.",
        ),
        q=("2025-03-10", "What's my dog's name?"),
        current="renamed the greyhound to Pepper",
        old="rescue called her Dolly",
        speaker="Nadia",
        split=SPLIT,
    ),
    _s(
        "lb4-pet-new-kitten",
        ("2025-01-12", "My cat Biscuit is sat on my keyboard again."),
        ("2025-06-01", "We lost Biscuit in April, she was seventeen. House feels empty."),
        ("2025-09-09", "New kitten! We called him Mango and he is pure chaos."),
        q=("2025-09-30", "What's my cat called?"),
        current="called him Mango",
        old="cat Biscuit is sat",
        speaker="Rhiannon",
        split=SPLIT,
    ),
    _s(
        "lb4-pet-rehomed-parrot",
        ("2025-03-08", "Our parrot Captain screams every morning at six."),
        ("2025-05-15", "Neighbours complained about the noise again."),
        (
            "2025-08-30",
            "We rehomed him to a bird sanctuary, it wasn't fair on him in a flat. The "
            "only pet we've got now is a tortoise called Shelby.",
        ),
        q=("2025-09-20", "What pet do I have?"),
        current="tortoise called Shelby",
        old="parrot Captain",
        speaker="Arjun",
        split=SPLIT,
    ),
)

CHILD: tuple[Scenario, ...] = (
    _s(
        "lb4-child-last-minute-name",
        ("2025-05-15", "The baby's name is going to be Olivia, we've decided."),
        ("2025-06-30", "Hospital bag is packed, just waiting now."),
        (
            "2025-08-02",
            "She's here! We changed our minds at the last minute, she's called Niamh.",
        ),
        q=("2025-08-20", "What's my daughter's name?"),
        current="she's called Niamh",
        old="baby's name is going to be Olivia",
        speaker="Aoife",
        split=SPLIT,
    ),
    _s(
        "lb4-child-goes-by",
        ("2025-01-20", "My eldest, Alexander, is doing his GCSEs this year."),
        ("2025-06-25", "Exams are over, he's been asleep for two days straight."),
        ("2025-09-05", "He wants everyone to call him Xander now, so please do."),
        q=("2025-09-25", "What does my eldest son go by?"),
        current="call him Xander now",
        old="eldest, Alexander",
        speaker="Helen",
        split=SPLIT,
    ),
    _s(
        "lb4-child-reception",
        ("2025-02-10", "Ruby goes to Little Acorns nursery three days a week."),
        ("2025-07-18", "Bought the school shoes today, she insisted on the sparkly ones."),
        (
            "2025-09-08",
            "Ruby started reception at St Mary's Primary on Thursday, she was so brave.",
        ),
        q=("2025-10-01", "Where does Ruby go in the daytime?"),
        current="reception at St Mary's Primary",
        old="Little Acorns nursery",
        speaker="Kerry",
        split=SPLIT,
    ),
)

FAVOURITE: tuple[Scenario, ...] = (
    _s(
        "lb4-fav-food",
        ("2025-02-02", "Favourite food ever is lasagne, no contest."),
        ("2025-04-20", "Off to Vietnam for three weeks on Friday!"),
        (
            "2025-07-07",
            "Going to be honest, since Hanoi, pho has overtaken lasagne as my favourite "
            "thing to eat.",
        ),
        q=("2025-08-01", "What's my favourite food?"),
        current="pho has overtaken lasagne",
        old="Favourite food ever is lasagne",
        speaker="Callum",
        split=SPLIT,
    ),
    _s(
        "lb4-fav-band",
        ("2025-01-30", "My favourite band is Arctic Monkeys, obsessed since school."),
        ("2025-05-12", "Got tickets for a gig in Dublin in the autumn."),
        (
            "2025-10-03",
            "These days my top band is Fontaines D.C., their album has been on repeat "
            "since spring.",
        ),
        q=("2025-10-25", "Who's my favourite band?"),
        current="top band is Fontaines D.C.",
        old="favourite band is Arctic Monkeys",
        speaker="Ciaran",
        split=SPLIT,
    ),
    _s(
        "lb4-fav-colour",
        ("2025-03-15", "Green's my favourite colour, always has been."),
        ("2025-06-02", "Painting the hallway this weekend, wish me luck."),
        (
            "2025-08-19",
            "Weirdly I've gone off green. Mustard yellow is my colour now, the hallway's "
            "done in it and everything.",
        ),
        q=("2025-09-05", "What's my favourite colour?"),
        current="Mustard yellow is my colour now",
        old="Green's my favourite colour",
        speaker="Imogen",
        split=SPLIT,
    ),
)

PLAN: tuple[Scenario, ...] = (
    _s(
        "lb4-plan-wedding-moved",
        ("2025-02-01", "Our wedding is on 14 June at a barn near Ludlow."),
        ("2025-02-15", "Dress fitting number two today."),
        (
            "2025-03-20",
            "The venue double-booked us, so the wedding's now 23 August. Same barn, thankfully.",
        ),
        q=("2025-04-01", "When's my wedding?"),
        current="wedding's now 23 August",
        old="wedding is on 14 June",
        speaker="Sophie",
        split=SPLIT,
    ),
    _s(
        "lb4-plan-op-brought-forward",
        ("2025-05-02", "My knee op is booked for the 9th of July."),
        ("2025-05-30", "Physio gave me exercises to do before the op."),
        (
            "2025-06-18",
            "Hospital rang, there was a cancellation so they've brought the knee op "
            "forward to the 25th of June.",
        ),
        q=("2025-06-19", "When is my knee surgery?"),
        current="forward to the 25th of June",
        old="booked for the 9th of July",
        speaker="Geoff",
        split=SPLIT,
    ),
    _s(
        "lb4-plan-flight-pushed",
        ("2025-07-10", "We fly to Crete on September 3rd for ten days."),
        ("2025-07-10", "agent: Crete in September is perfect, not too hot."),
        (
            "2025-08-12",
            "Ugh, had to push Crete back a week because of work, so now flying out on the 10th.",
        ),
        q=("2025-08-20", "When do I fly to Crete?"),
        current="now flying out on the 10th",
        old="fly to Crete on September 3rd",
        speaker="Maria",
        split=SPLIT,
    ),
    _s(
        "lb4-plan-test-rebooked",
        ("2025-01-22", "My driving test is on the 3rd of March, bricking it."),
        ("2025-02-08", "Stalled twice on a hill start today."),
        (
            "2025-02-25",
            "My instructor reckons I'm not ready, so I've rebooked the test for 14 April.",
        ),
        q=("2025-03-01", "When's my driving test?"),
        current="rebooked the test for 14 April",
        old="driving test is on the 3rd of March",
        speaker="Zainab",
        split=SPLIT,
    ),
)

TOOL: tuple[Scenario, ...] = (
    _s(
        "lb4-tool-phone",
        ("2025-02-15", "I'm on a Pixel 7, the camera is brilliant."),
        ("2025-05-20", "Everyone in the family group chat uses iMessage, it's annoying."),
        ("2025-09-25", "Caved and got an iPhone 17, the green bubbles were too much."),
        q=("2025-10-10", "What phone have I got?"),
        current="got an iPhone 17",
        old="on a Pixel 7",
        speaker="Leon",
        split=SPLIT,
    ),
    _s(
        "lb4-tool-notes",
        ("2025-03-03", "I keep all my notes in Evernote, work and personal."),
        ("2025-05-19", "Their pricing went up again, it's getting silly."),
        ("2025-06-06", "Migrated everything over to Obsidian last weekend, so much faster."),
        q=("2025-07-01", "Which app do I use for notes?"),
        current="over to Obsidian",
        old="notes in Evernote",
        speaker="Priya",
        split=SPLIT,
    ),
    _s(
        "lb4-tool-energy",
        ("2025-01-11", "We're with Octopus for gas and electric."),
        ("2025-06-30", "Our fixed deal ends in October, need to look around."),
        (
            "2025-10-29",
            "We've gone over to British Gas for the energy, their fix was better.",
        ),
        q=("2025-11-15", "Who's our energy supplier?"),
        current="gone over to British Gas",
        old="with Octopus for gas",
        speaker="Martin",
        split=SPLIT,
    ),
    _s(
        "lb4-tool-car",
        ("2025-04-01", "I drive a 2012 Honda Civic, it's held together with tape."),
        ("2025-04-01", "agent: If it runs, it runs!"),
        (
            "2025-08-08",
            "The Civic finally died on the M62, so we've replaced it with a secondhand "
            "Kia Niro EV.",
        ),
        q=("2025-09-01", "What car do I drive?"),
        current="secondhand Kia Niro EV",
        old="2012 Honda Civic",
        speaker="Shaun",
        split=SPLIT,
    ),
)

HABIT: tuple[Scenario, ...] = (
    _s(
        "lb4-diet-vegan",
        ("2025-01-05", "I'm vegetarian, have been since uni."),
        ("2025-03-14", "Found an amazing Ethiopian place near work."),
        ("2025-04-30", "Went fully vegan at Easter, so no cheese for me anymore, sob."),
        q=("2025-05-20", "What's my diet?"),
        current="Went fully vegan at Easter",
        old="vegetarian, have been since uni",
        speaker="Ella",
        split=SPLIT,
    ),
    _s(
        "lb4-diet-meat-again",
        ("2025-02-10", "I'm pescatarian, so fish is fine but no meat please."),
        ("2025-07-02", "Blood test results came back, iron is through the floor."),
        (
            "2025-09-15",
            "On doctor's orders I've started eating meat again, steak twice a week.",
        ),
        q=("2025-10-01", "Do I have any dietary restrictions?"),
        current="started eating meat again",
        old="pescatarian, so fish is fine",
        speaker="Ines",
        split=SPLIT,
    ),
    _s(
        "lb4-habit-quit-smoking",
        ("2025-01-18", "I smoke about ten a day, I know, I know."),
        ("2025-02-27", "Picked up nicotine patches from the chemist."),
        ("2025-06-01", "Three months off the cigs today! The patches did it."),
        q=("2025-06-15", "Do I smoke?"),
        current="Three months off the cigs",
        old="smoke about ten a day",
        speaker="Gary",
        split=SPLIT,
    ),
    _s(
        "lb4-habit-runs-to-swims",
        ("2025-03-10", "I run every morning before work, about 5k."),
        ("2025-08-15", "Did my Achilles on a trail run, physio says months."),
        (
            "2025-10-20",
            "Since the Achilles went I've swapped the morning runs for swimming at the "
            "leisure centre.",
        ),
        q=("2025-11-05", "What do I do for exercise?"),
        current="swapped the morning runs for swimming",
        old="run every morning before work",
        speaker="Agnieszka",
        split=SPLIT,
    ),
)

OTHER: tuple[Scenario, ...] = (
    _s(
        "lb4-other-surname",
        ("2025-03-01", "My name's Claire Robson, by the way, in case forms need it."),
        ("2025-08-16", "Wedding was perfect, still on a high."),
        (
            "2025-09-20",
            "Heads up, I'm Claire Okafor now, changed my surname after the wedding.",
        ),
        q=("2025-10-05", "What's my surname?"),
        current="Claire Okafor now",
        old="Claire Robson",
        speaker="Claire",
        split=SPLIT,
    ),
    _s(
        "lb4-other-email",
        ("2025-02-02", "My email is jt.walsh@hotmail.co.uk if you need it."),
        ("2025-07-11", "The joinery business is finally getting a proper website."),
        (
            "2025-11-05",
            "Please use jamie@walshjoinery.ie from now on, I'm closing the hotmail one.",
        ),
        q=("2025-11-20", "What's my email address?"),
        current="jamie@walshjoinery.ie",
        old="jt.walsh@hotmail.co.uk",
        speaker="Jamie",
        split=SPLIT,
    ),
    _s(
        "lb4-other-language",
        ("2025-01-01", "I'm learning Spanish on Duolingo, 200 day streak!"),
        ("2025-05-09", "We've booked Osaka for next spring!"),
        (
            "2025-07-01",
            "Dropped the Spanish, I'm doing Japanese now because of the Osaka trip.",
        ),
        q=("2025-07-20", "What language am I learning?"),
        current="doing Japanese now",
        old="learning Spanish on Duolingo",
        speaker="Beth",
        split=SPLIT,
    ),
    _s(
        "lb4-other-engagement-off",
        ("2025-02-14", "I'm engaged to Marcus! Wedding next summer!"),
        ("2025-06-01", "Wedding planning is stressing me out more than work."),
        (
            "2025-09-09",
            "The engagement's off. Marcus and I want different things. I'm okay, really.",
        ),
        q=("2025-09-30", "Am I engaged?"),
        current="The engagement's off",
        old="engaged to Marcus!",
        speaker="Tanya",
        split=SPLIT,
    ),
)

KEEPS: tuple[Scenario, ...] = (
    _s(
        "lb4-keep-brother-moved",
        ("2025-02-01", "I live in Cardiff, Pontcanna, in a little terrace."),
        (
            "2025-07-12",
            "My brother's moved to Swansea for his PhD, so no more Sunday dinners at mine.",
        ),
        q=("2025-08-01", "Where do I live?"),
        keep=("Cardiff, Pontcanna",),
        speaker="Gethin",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-asking-about-kpmg",
        ("2025-03-03", "I work at Deloitte in the audit team."),
        ("2025-06-06", "Do you reckon I should apply to KPMG? Their offer looks decent."),
        q=("2025-07-01", "Where do I work?"),
        keep=("Deloitte in the audit team",),
        speaker="Hamza",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-second-dog-someday",
        ("2025-01-09", "Our dog is called Hamish, he's a westie."),
        ("2025-05-20", "If we ever get a second dog I want to name it Fergus."),
        q=("2025-06-01", "What's my dog called?"),
        keep=("dog is called Hamish",),
        speaker="Morag",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-added-rabbit",
        ("2025-02-12", "My cat's name is Tofu."),
        (
            "2025-08-01",
            "We got a rabbit as well! Her name's Clover, she and Tofu are still wary of "
            "each other.",
        ),
        q=("2025-08-20", "What is my cat called?"),
        keep=("cat's name is Tofu",),
        speaker="Yuki",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-tutoring-on-top",
        ("2025-03-15", "I'm a primary school teacher in Stockport."),
        (
            "2025-10-01",
            "Started tutoring two evenings a week on top of the teaching, Christmas money.",
        ),
        q=("2025-10-20", "What's my job?"),
        keep=("primary school teacher in Stockport",),
        speaker="Lydia",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-mates-girlfriend",
        ("2025-01-25", "My wife Sinead is a paramedic."),
        ("2025-06-15", "My mate Declan's new girlfriend is called Orla, she's lovely."),
        q=("2025-07-01", "What's my wife's name?"),
        keep=("wife Sinead",),
        speaker="Padraig",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-back-when-christchurch",
        ("2025-04-01", "We live in Wellington, in Aro Valley."),
        ("2025-09-01", "Back when I lived in Christchurch we had the quakes, rough time."),
        q=("2025-09-20", "Where do I live?"),
        keep=("Wellington, in Aro Valley",),
        speaker="Aroha",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-conference-week",
        ("2025-02-02", "I'm based in Toronto, Leslieville."),
        ("2025-07-20", "I'm in Vancouver this week for a conference, staying downtown."),
        q=("2025-08-10", "Where's home for me?"),
        keep=("Toronto, Leslieville",),
        speaker="Devon",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-fasting-as-well",
        ("2025-01-30", "I'm keto, have been for a year."),
        ("2025-05-05", "Thinking about trying intermittent fasting as well, any tips?"),
        q=("2025-06-01", "What diet am I on?"),
        keep=("keto, have been for a year",),
        speaker="Rashid",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-dentist-moved",
        ("2025-03-01", "My sister's hen do is on the 12th of April in Newcastle."),
        ("2025-03-20", "My dentist appointment got moved to the 15th of April."),
        q=("2025-03-25", "When's the hen do?"),
        keep=("hen do is on the 12th of April",),
        speaker="Stacey",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-sons-best-friend",
        ("2025-02-02", "My son's called Oisín, he's six."),
        ("2025-04-04", "His new best friend at school is called Cillian, they're inseparable."),
        q=("2025-05-01", "What's my son's name?"),
        keep=("son's called Oisín",),
        speaker="Orlaith",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-no-longer-netflix",
        ("2025-01-15", "I use Spotify for music, couldn't live without it."),
        ("2025-06-06", "No longer paying for Netflix, there's nothing on."),
        q=("2025-06-20", "What do I use for music?"),
        keep=("Spotify for music",),
        speaker="Mateo",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-favourite-album",
        ("2025-02-20", "My favourite film is Paddington 2, don't @ me."),
        ("2025-07-07", "New favourite album: the latest Wet Leg, it's so good."),
        q=("2025-08-01", "What's my favourite film?"),
        keep=("favourite film is Paddington 2",),
        speaker="Freya",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-colleague-promoted",
        ("2025-03-03", "I'm a senior designer at Canva."),
        ("2025-09-09", "My colleague Ravi just got made design lead, well deserved."),
        q=("2025-10-01", "What's my job title?"),
        keep=("senior designer at Canva",),
        speaker="Chloe",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-phone-for-mum",
        ("2025-04-04", "I've got a Samsung Galaxy S23."),
        ("2025-08-08", "Bought Mum an iPhone so she can FaceTime the grandkids."),
        q=("2025-09-01", "What phone do I use?"),
        keep=("Samsung Galaxy S23",),
        speaker="Rob",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-rumour-denied",
        ("2025-01-01", "I work at the Guardian on the sports desk."),
        (
            "2025-05-05",
            "Someone at the pub asked if I'd moved to the BBC. No, still at the same place!",
        ),
        q=("2025-06-01", "Where do I work?"),
        keep=("Guardian on the sports desk",),
        speaker="Nick",
        split=SPLIT,
    ),
    _s(
        "lb4-keep-rigs-turned-down",
        ("2025-02-11", "I'm an electrician with a firm in Dundee."),
        (
            "2025-08-20",
            "Got offered a job on the rigs out of Aberdeen but I turned it down, too long "
            "away from the kids.",
        ),
        q=("2025-09-05", "Where do I work?"),
        keep=("electrician with a firm in Dundee",),
        speaker="Stuart",
        split=SPLIT,
    ),
)

CHANGES: tuple[Scenario, ...] = (
    HOME + WORK + TITLE + PARTNER + PET + CHILD + FAVOURITE + PLAN + TOOL + HABIT + OTHER
)

LOCKBOX_4: tuple[Scenario, ...] = CHANGES + KEEPS
