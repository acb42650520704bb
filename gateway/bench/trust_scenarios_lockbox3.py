"""A third lockbox set of ``agentgw bench trust``: written blind, run once.

Written on 2026-11-28 by a helper session (branch h/lockbox3) that did not open
the slot, status, role, frame, validity or trust-pass rules (memory/slots.py,
statuses.py, roles.py, trust.py, validity.py, frames.py, slot_grammar.py) nor
the design notes about them, and did not run the bench or any rule on these
scenarios, while another engineer was changing those rules without seeing this
set. Only the Scenario format and lockbox_2's shape were read; the people,
places, brands and wordings are new (none repeats another set's). Its first run
after the rules are frozen is its figure; after that it is no longer blind and
must not be tuned on.

Changes (``current`` and ``old``: words only in the statement true now and in
the one it replaced) are grouped by slot kind: where the person lives, their
employer, their role, their partner, a pet's name, a child's name, a favourite,
a plan's date, a switch of phone / app / diet / provider, and things that ended.
The phrasing is the plain chat of several Englishes (British, Irish, American,
Indian, Nigerian, Australian, Canadian): the change is sometimes in a
subordinate clause, sometimes names the old value and sometimes not, and an
unrelated message or an agent line sometimes sits in between. Keeps (``keep``:
words of a statement that must stay valid) are later statements that end
nothing: someone else's change, the past, a hypothetical, a plan considered
but not made, a visit, a second job or hobby, a change of another thing of the
same kind, and "no longer" about something else.
"""

from __future__ import annotations

from gateway.bench.trust_scenarios import Scenario, _s

SPLIT = "lockbox_3"

HOME: tuple[Scenario, ...] = (
    _s(
        "lb3-home-up-north",
        (
            "2024-02-10",
            "I'm renting a two-bed in Fremantle with my sister, walking distance to the markets.",
        ),
        ("2024-02-10", "agent: Sounds like a great spot to be."),
        (
            "2024-12-01",
            "now that we're up in Darwin the humidity is killing me, "
            "but the sunsets make up for it",
        ),
        q=("2025-01-05", "Where do I live these days?"),
        current="up in Darwin",
        old="two-bed in Fremantle",
        speaker="Jarrah",
        split=SPLIT,
    ),
    _s(
        "lb3-home-shifted",
        ("2023-08-15", "I stay in Pune, Kothrud side, with my parents."),
        (
            "2024-07-20",
            "Shifted to Bengaluru last month for the new project, PG near Koramangala for now.",
        ),
        q=("2024-08-30", "Which city am I staying in?"),
        current="Shifted to Bengaluru",
        old="stay in Pune",
        speaker="Aditya",
        split=SPLIT,
    ),
    _s(
        "lb3-home-closed",
        ("2024-01-12", "We're in a rowhouse in Baltimore, Hampden neighborhood."),
        ("2024-03-01", "What's a good substitute for buttermilk in pancakes?"),
        (
            "2024-09-18",
            "closed on a house in Richmond finally!! moving trucks came Saturday",
        ),
        q=("2024-10-20", "where's home for me now?"),
        current="house in Richmond",
        old="rowhouse in Baltimore",
        speaker="DeShawn",
        split=SPLIT,
    ),
    _s(
        "lb3-home-just-after",
        ("2023-11-05", "Living in Limerick city, ten minutes from the Milk Market."),
        (
            "2024-10-10",
            "Sorry for the slow replies, we're just after moving to Galway "
            "and the broadband isn't in yet.",
        ),
        q=("2024-11-15", "What city do I live in?"),
        current="moving to Galway",
        old="Limerick city",
        speaker="Niamh",
        split=SPLIT,
    ),
)

WORK: tuple[Scenario, ...] = (
    _s(
        "lb3-work-notice",
        ("2023-06-01", "I'm a data analyst at Just Eat, mostly forecasting order volumes."),
        (
            "2024-08-19",
            "Handed in my notice on Friday, I start at Starling on the 2nd of September.",
        ),
        q=("2024-10-01", "Which company am I working for?"),
        current="start at Starling",
        old="analyst at Just Eat",
        speaker="Priyanka",
        split=SPLIT,
    ),
    _s(
        "lb3-work-resumed",
        ("2023-04-04", "I work with Access Bank, Victoria Island branch."),
        (
            "2024-06-06",
            "I've resumed at Flutterwave, the commute is worse but the pay is better.",
        ),
        q=("2024-07-10", "Which company do I work with?"),
        current="resumed at Flutterwave",
        old="with Access Bank",
        speaker="Chiamaka",
        split=SPLIT,
    ),
    _s(
        "lb3-work-hired",
        ("2024-01-20", "I'm a line cook at a Cheesecake Factory in Scottsdale."),
        ("2024-02-02", "agent: That must mean some busy weekend shifts!"),
        (
            "2024-07-07",
            "got hired at a little Thai spot downtown, no more corporate menus for me",
        ),
        q=("2024-08-15", "Where do I cook now?"),
        current="little Thai spot downtown",
        old="Cheesecake Factory",
        speaker="Marisol",
        split=SPLIT,
    ),
    _s(
        "lb3-work-three-weeks",
        ("2023-09-09", "I'm with Telus in their Burnaby office, network ops."),
        (
            "2024-05-15",
            "Been at Shopify three weeks now and I still can't find anything in Slack lol",
        ),
        q=("2024-06-20", "Who do I work for?"),
        current="at Shopify three weeks",
        old="with Telus",
        speaker="Gurpreet",
        split=SPLIT,
    ),
)

ROLE: tuple[Scenario, ...] = (
    _s(
        "lb3-role-promoted",
        ("2023-10-10", "I'm a software engineer II on the checkout team."),
        (
            "2024-11-20",
            "Got promoted to senior engineer in the review cycle, still on checkout.",
        ),
        q=("2024-12-15", "What's my job title?"),
        current="promoted to senior engineer",
        old="software engineer II",
        speaker="Anjali",
        split=SPLIT,
    ),
    _s(
        "lb3-role-made-permanent",
        ("2023-03-03", "I'm assistant manager at the Tesco Express on the high street."),
        (
            "2024-04-04",
            "Been covering as store manager since my boss left, "
            "and head office just made it permanent!",
        ),
        q=("2024-05-01", "What's my role at the shop?"),
        current="store manager since",
        old="assistant manager",
        speaker="Kayleigh",
        split=SPLIT,
    ),
    _s(
        "lb3-role-lectureship",
        ("2023-09-01", "I'm a postdoc in the chemistry department, working on catalysts."),
        (
            "2024-09-01",
            "Started my lectureship this week, first lecture to 200 first-years on Thursday, eek",
        ),
        q=("2024-10-01", "What's my position at the university?"),
        current="Started my lectureship",
        old="postdoc in the chemistry",
        speaker="Oluwaseun",
        split=SPLIT,
    ),
    _s(
        "lb3-role-sworn-in",
        ("2024-02-02", "I'm a law clerk at a small immigration firm, lots of filing."),
        ("2025-01-15", "Passed the bar!! Officially an attorney, sworn in yesterday"),
        q=("2025-02-01", "Am I still a law clerk?"),
        current="Officially an attorney",
        old="law clerk at a small",
        speaker="Xiomara",
        split=SPLIT,
    ),
)

PARTNER: tuple[Scenario, ...] = (
    _s(
        "lb3-partner-called-off",
        ("2023-07-01", "My fiancé Brendan proposed on a hike last weekend, still buzzing."),
        ("2024-06-15", "Called off the engagement with Brendan. It's for the best."),
        q=("2024-07-20", "Am I engaged?"),
        current="Called off the engagement",
        old="fiancé Brendan",
        speaker="Aisling",
        split=SPLIT,
    ),
    _s(
        "lb3-partner-someone-new",
        ("2023-02-02", "My partner Jordi does all the cooking, I'm hopeless."),
        ("2023-11-11", "Jordi moved out in October, we're done."),
        ("2024-08-08", "Been seeing someone new, her name's Valentina, she's a vet."),
        q=("2024-09-01", "Who am I seeing?"),
        current="her name's Valentina",
        old="partner Jordi",
        speaker="Fenna",
        split=SPLIT,
    ),
    _s(
        "lb3-partner-married",
        ("2024-01-05", "Going out with Arjun from my yoga class, it's early days."),
        (
            "2025-06-20",
            "We got married at the registry office on Saturday, Arjun cried more than me",
        ),
        q=("2025-07-10", "Am I married?"),
        current="got married at the registry",
        old="Going out with Arjun",
        speaker="Simran",
        split=SPLIT,
    ),
)

PET: tuple[Scenario, ...] = (
    _s(
        "lb3-pet-calling",
        (
            "2024-03-10",
            "Adopted a whippet called Flash from the rescue, he's a total couch potato.",
        ),
        (
            "2024-03-25",
            "We've started calling the whippet Dobby instead, Flash never suited him "
            "and he already answers to it.",
        ),
        q=("2024-05-01", "What's my whippet called?"),
        current="calling the whippet Dobby",
        old="whippet called Flash",
        speaker="Lachlan",
        split=SPLIT,
    ),
    _s(
        "lb3-pet-new-bird",
        ("2023-05-05", "My budgie Kiwi chats all day, mostly swear words my dad taught him."),
        (
            "2024-02-02",
            "Kiwi passed away last week. We've got a cockatiel now, Mango, "
            "the kids picked the name.",
        ),
        q=("2024-03-15", "What's my bird called?"),
        current="cockatiel now, Mango",
        old="budgie Kiwi chats",
        speaker="Thandiwe",
        split=SPLIT,
    ),
    _s(
        "lb3-pet-renamed-by-son",
        ("2024-06-01", "The cat's name is Mr Whiskers, my son named him when he was four."),
        (
            "2024-10-10",
            "My son has renamed Mr Whiskers to Shadow because apparently "
            "the old name is 'for babies'.",
        ),
        q=("2024-11-01", "What's the cat's name?"),
        current="to Shadow",
        old="name is Mr Whiskers",
        speaker="Joanne",
        split=SPLIT,
    ),
)

CHILD: tuple[Scenario, ...] = (
    _s(
        "lb3-child-born",
        ("2024-03-03", "Baby is due in June and we've picked Matilda for a name."),
        (
            "2024-06-20",
            "Welcome to the world, Beatrix! Matilda was the plan but she looked like a Beatrix.",
        ),
        q=("2024-08-01", "What's my baby's name?"),
        current="Welcome to the world, Beatrix",
        old="picked Matilda",
        speaker="Rhiannon",
        split=SPLIT,
    ),
    _s(
        "lb3-child-wants-to-be-called",
        ("2023-10-10", "My youngest, Christopher, just started kindergarten."),
        ("2024-09-09", "Our youngest wants to be called Kit now and honestly it suits him."),
        q=("2024-10-01", "What does my youngest go by?"),
        current="called Kit now",
        old="youngest, Christopher",
        speaker="Dana",
        split=SPLIT,
    ),
)

FAVOURITE: tuple[Scenario, ...] = (
    _s(
        "lb3-fav-dessert",
        ("2023-12-12", "favourite dessert hands down is tiramisu"),
        ("2024-08-08", "ok new favourite dessert: basque cheesecake. tiramisu who?"),
        q=("2024-09-01", "What's my favourite dessert?"),
        current="basque cheesecake",
        old="hands down is tiramisu",
        speaker="Renee",
        split=SPLIT,
    ),
    _s(
        "lb3-fav-book",
        ("2024-02-02", "My favourite book is Wolf Hall, I reread it every couple of years."),
        (
            "2024-12-01",
            "Just finished Piranesi and I think it's knocked Wolf Hall off the top spot for me.",
        ),
        q=("2025-01-10", "What's my favourite book?"),
        current="finished Piranesi",
        old="favourite book is Wolf Hall",
        speaker="Felicity",
        split=SPLIT,
    ),
    _s(
        "lb3-fav-podcast",
        ("2024-01-01", "Current favourite podcast is Radiolab, I listen on every run."),
        (
            "2024-07-07",
            "These days Hard Fork is the podcast I never skip, I kind of drifted off Radiolab.",
        ),
        q=("2024-08-01", "What's my favourite podcast?"),
        current="Hard Fork is the podcast",
        old="favourite podcast is Radiolab",
        speaker="Tobias",
        split=SPLIT,
    ),
    _s(
        "lb3-fav-coffee",
        ("2024-03-03", "My go-to drink is a flat white, oat milk please."),
        ("2024-05-05", "agent: Noted, oat flat white it is."),
        ("2024-10-10", "I've become a cortado person, flat whites feel too big now."),
        q=("2024-11-01", "What's my usual coffee order?"),
        current="become a cortado person",
        old="go-to drink is a flat white",
        speaker="Mehmet",
        split=SPLIT,
    ),
)

PLAN: tuple[Scenario, ...] = (
    _s(
        "lb3-plan-wedding",
        ("2024-02-02", "Our wedding is on 14 September at a barn in Herefordshire."),
        ("2024-04-04", "agent: Congratulations! How are the plans going?"),
        (
            "2024-05-20",
            "Venue double-booked us so the wedding's now 5 October, same place thank god.",
        ),
        q=("2024-06-01", "When's my wedding?"),
        current="wedding's now 5 October",
        old="wedding is on 14 September",
        speaker="Lauren",
        split=SPLIT,
    ),
    _s(
        "lb3-plan-surgery",
        ("2025-02-10", "My shoulder surgery is scheduled for March 18."),
        (
            "2025-03-05",
            "Hospital called, surgery got pushed to April 2 because the surgeon's out.",
        ),
        q=("2025-03-10", "When is my shoulder surgery?"),
        current="pushed to April 2",
        old="scheduled for March 18",
        speaker="Dwayne",
        split=SPLIT,
    ),
    _s(
        "lb3-plan-visa",
        ("2024-10-01", "My visa interview at the embassy is on 20 November."),
        ("2024-10-15", "Got an earlier slot for the visa interview, it's 6 November now!"),
        q=("2024-10-20", "When's my visa interview?"),
        current="6 November now",
        old="is on 20 November",
        speaker="Farhan",
        split=SPLIT,
    ),
)

SWITCH: tuple[Scenario, ...] = (
    _s(
        "lb3-switch-phone",
        ("2023-11-11", "Using a Xiaomi 13 at the moment, the camera is amazing for the price."),
        (
            "2024-10-02",
            "Swapped the Xiaomi for a Nothing Phone 2a, the lights on the back are silly "
            "but I love them",
        ),
        q=("2024-11-01", "What phone am I on?"),
        current="Nothing Phone 2a",
        old="Xiaomi 13",
        speaker="Camila",
        split=SPLIT,
    ),
    _s(
        "lb3-switch-notes",
        ("2024-01-01", "I write all my notes in OneNote, work and personal."),
        ("2024-08-08", "Moved my whole notes setup over to Obsidian, local files feel safer."),
        q=("2024-09-01", "What app do I keep my notes in?"),
        current="over to Obsidian",
        old="notes in OneNote",
        speaker="Zofia",
        split=SPLIT,
    ),
    _s(
        "lb3-switch-diet",
        (
            "2023-06-06",
            "Been doing 16:8 intermittent fasting since January, no food before noon.",
        ),
        (
            "2024-03-03",
            "stopped the fasting thing, it was making me cranky. "
            "just doing a high-protein plan now",
        ),
        q=("2024-04-01", "What eating plan am I following?"),
        current="high-protein plan",
        old="16:8 intermittent fasting",
        speaker="Kenji",
        split=SPLIT,
    ),
    _s(
        "lb3-switch-broadband",
        ("2024-02-02", "Our broadband is with Virgin Media, it drops every evening."),
        ("2024-07-07", "Finally switched to Community Fibre, speeds are night and day."),
        q=("2024-08-01", "Who's our broadband provider?"),
        current="switched to Community Fibre",
        old="with Virgin Media",
        speaker="Adebayo",
        split=SPLIT,
    ),
    _s(
        "lb3-switch-budget-app",
        ("2024-01-15", "I budget with YNAB, it's the only thing that's ever worked for me."),
        ("2024-06-01", "Quick q, how do I unsubscribe from a newsletter in Gmail?"),
        (
            "2024-11-11",
            "YNAB got too pricey so I've gone back to a plain spreadsheet, honestly simpler",
        ),
        q=("2024-12-01", "What do I use for budgeting?"),
        current="plain spreadsheet",
        old="budget with YNAB",
        speaker="Wren",
        split=SPLIT,
    ),
)

ENDED: tuple[Scenario, ...] = (
    _s(
        "lb3-ended-smoking",
        ("2023-04-04", "I smoke about ten a day, I know, I know."),
        ("2024-01-20", "Three weeks without a cigarette! Patches are doing the heavy lifting."),
        q=("2024-03-01", "Do I smoke?"),
        current="without a cigarette",
        old="smoke about ten a day",
        speaker="Donal",
        split=SPLIT,
    ),
    _s(
        "lb3-ended-costco",
        ("2024-01-01", "We've got a Costco membership, the kids live on the hot dogs."),
        ("2024-09-09", "Cancelled our Costco membership, we were buying way too much stuff."),
        q=("2024-10-01", "Are we Costco members?"),
        current="Cancelled our Costco",
        old="got a Costco membership",
        speaker="Shauna",
        split=SPLIT,
    ),
    _s(
        "lb3-ended-volunteering",
        ("2023-09-09", "I volunteer at the soup kitchen on Saturdays."),
        (
            "2024-06-06",
            "I'm not doing the Saturday soup kitchen shifts anymore, "
            "my weekends are all kids' football now.",
        ),
        q=("2024-07-01", "Do I still volunteer on Saturdays?"),
        current="anymore, my weekends",
        old="volunteer at the soup kitchen",
        speaker="Terrence",
        split=SPLIT,
    ),
    _s(
        "lb3-ended-lessons",
        ("2024-01-01", "Taking Greek lessons on Tuesdays with a tutor online."),
        ("2024-05-05", "Stopped the Greek lessons, couldn't keep up with work."),
        q=("2024-06-01", "Am I still learning Greek?"),
        current="Stopped the Greek",
        old="Taking Greek lessons",
        speaker="Mia",
        split=SPLIT,
    ),
)

KEEPS: tuple[Scenario, ...] = (
    _s(
        "lb3-keep-sister-moved",
        ("2024-02-02", "I live in Norwich, Golden Triangle, with my cat."),
        (
            "2024-06-06",
            "My sister's just moved to Cambridge, so I'll be up and down the A11 a lot.",
        ),
        q=("2024-07-01", "Where do I live?"),
        keep=("Norwich, Golden Triangle",),
        speaker="Gemma",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-past-job",
        ("2024-03-03", "I'm a pharmacist at Superdrug in the town centre."),
        (
            "2024-08-08",
            "When I worked at Lloyds Pharmacy the hours were way worse, I'll say that.",
        ),
        q=("2024-09-01", "Where do I work?"),
        keep=("pharmacist at Superdrug",),
        speaker="Ravinder",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-if-we-move",
        ("2024-01-10", "I live in Auckland, Ponsonby, been here ten years."),
        ("2024-05-05", "If we ever move to Queenstown I'm getting a dog, no question."),
        q=("2024-06-01", "Where do I live?"),
        keep=("Auckland, Ponsonby",),
        speaker="Manaia",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-thinking-of-applying",
        ("2024-02-02", "I'm a structural engineer at Arup, mostly bridges."),
        ("2024-09-09", "Thinking about applying to WSP next year, maybe. We'll see."),
        q=("2024-10-01", "Which firm am I at?"),
        keep=("structural engineer at Arup",),
        speaker="Kwabena",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-work-trip",
        ("2024-03-03", "We live in Durban, Umhlanga side, close to the beach."),
        ("2024-07-07", "In Johannesburg for the week for work, it's freezing here!"),
        q=("2024-08-01", "Where do I live?"),
        keep=("Durban, Umhlanga",),
        speaker="Sipho",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-second-job",
        ("2024-01-01", "I'm a nurse at St Vincent's, day shifts mostly."),
        ("2024-04-04", "Picked up weekend shifts at a garden centre too, extra cash for the trip."),
        q=("2024-05-01", "Where do I work?"),
        keep=("nurse at St Vincent's",),
        speaker="Maeve",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-second-hobby",
        ("2024-02-02", "My main hobby is woodturning, I've got a lathe in the garage."),
        ("2024-06-06", "Started going to a life drawing class on Thursdays as well, very zen."),
        q=("2024-07-01", "What are my hobbies?"),
        keep=("woodturning, I've got a lathe",),
        speaker="Bernard",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-switched-plan",
        ("2024-01-01", "I'm on a Motorola Edge, the battery lasts forever."),
        ("2024-05-05", "Switched my mobile plan to Mint, half the price of Verizon."),
        q=("2024-06-01", "What phone do I have?"),
        keep=("Motorola Edge",),
        speaker="Tyrone",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-girlfriend-favourite",
        ("2024-01-01", "My favourite season is autumn, all the colours."),
        (
            "2024-03-03",
            "My girlfriend says summer is her favourite season, which is wrong obviously.",
        ),
        q=("2024-04-01", "What's my favourite season?"),
        keep=("favourite season is autumn",),
        speaker="Elliot",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-parents-dog-renamed",
        ("2024-02-02", "Our dog Bonnie is a collie cross, full of beans."),
        (
            "2024-06-06",
            "My parents renamed their rescue dog Waffles, his old name was Duke.",
        ),
        q=("2024-07-01", "What's my dog's name?"),
        keep=("dog Bonnie is a collie",),
        speaker="Isobel",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-friend-diet",
        ("2024-01-01", "I'm gluten-free because of coeliac, have been since I was a kid."),
        (
            "2024-05-05",
            "My friend keeps trying to get me to do the carnivore diet with her, not happening.",
        ),
        q=("2024-06-01", "Am I gluten-free?"),
        keep=("gluten-free because of coeliac",),
        speaker="Orla",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-other-date",
        ("2024-03-03", "My citizenship ceremony is on 9 May at the town hall."),
        ("2024-04-04", "Booked the car in for its service on 2 May."),
        q=("2024-04-20", "When's my citizenship ceremony?"),
        keep=("citizenship ceremony is on 9 May",),
        speaker="Anh",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-no-longer-parking",
        ("2024-02-02", "I run a stall at the Saturday farmers' market, sourdough and focaccia."),
        ("2024-06-06", "The market no longer lets us park behind the hall, total pain."),
        q=("2024-07-01", "Do I still have the market stall?"),
        keep=("stall at the Saturday farmers'",),
        speaker="Ruth",
        split=SPLIT,
    ),
    _s(
        "lb3-keep-manager-promoted",
        ("2024-01-01", "I'm a team lead in customer support at an airline."),
        (
            "2024-07-07",
            "My manager got promoted to director so there's a vacancy above me, we'll see.",
        ),
        q=("2024-08-01", "What's my role?"),
        keep=("team lead in customer support",),
        speaker="Yasmin",
        split=SPLIT,
    ),
)

CHANGES: tuple[Scenario, ...] = (
    HOME + WORK + ROLE + PARTNER + PET + CHILD + FAVOURITE + PLAN + SWITCH + ENDED
)

LOCKBOX_3: tuple[Scenario, ...] = CHANGES + KEEPS
