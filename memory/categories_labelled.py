"""A labelled set for the no-model categoriser: 96 items, 12 a category, as people say
them (episodes and stored facts), written apart from the prototypes and the rules.

``agentgw``'s tests measure the categoriser's accuracy on it (tests/test_memory_weekly.py)
and docs/DESIGN.md reports the figure.
"""

from __future__ import annotations

from memory.categories import Category
from memory.types import ItemType

E, F, P, R, V = (
    ItemType.EPISODE,
    ItemType.FACT,
    ItemType.PREFERENCE,
    ItemType.RELATIONAL,
    ItemType.EVENT,
)

LABELLED: tuple[tuple[ItemType, str, Category], ...] = (
    # persona
    (ItemType.PERSONA, "Sam is a retired firefighter", Category.PERSONA),
    (E, "I'm originally from Kraków but I've lived in Dublin for years", Category.PERSONA),
    (F, "Caroline is a transgender woman", Category.PERSONA),
    (E, "I'm 41 and left-handed", Category.PERSONA),
    (E, "honestly I'm a pretty anxious person around strangers", Category.PERSONA),
    (F, "Ada identifies as an early riser and a morning person", Category.PERSONA),
    (E, "I was born in Nairobi", Category.PERSONA),
    (F, "Tom is an atheist", Category.PERSONA),
    (E, "people say I'm stubborn, and they're right", Category.PERSONA),
    (F, "Mel is bilingual in Portuguese and French", Category.PERSONA),
    (E, "I'm a night owl, always have been", Category.PERSONA),
    (F, "Jon describes himself as a minimalist", Category.PERSONA),
    # preferences
    (P, "Prefers answers in bullet points", Category.PREFERENCES),
    (E, "I can't stand cilantro", Category.PREFERENCES),
    (E, "my favourite band is Radiohead", Category.PREFERENCES),
    (F, "Sam likes his coffee black with no sugar", Category.PREFERENCES),
    (E, "I'd much rather have a window seat", Category.PREFERENCES),
    (E, "please don't call me Samuel, just Sam", Category.PREFERENCES),
    (F, "Ada dislikes crowded places", Category.PREFERENCES),
    (E, "I only drink oat milk", Category.PREFERENCES),
    (E, "I like my room cold when I sleep", Category.PREFERENCES),
    (F, "Mel's favourite food is ramen", Category.PREFERENCES),
    (E, "I hate small talk on the phone", Category.PREFERENCES),
    (E, "dark mode everywhere, always", Category.PREFERENCES),
    # facts
    (F, "The spare key is under the blue flowerpot", Category.FACTS),
    (E, "our wifi password is on the fridge", Category.FACTS),
    (F, "Sam's car is a 2012 Honda Civic", Category.FACTS),
    (E, "the flat is on the fourth floor with no lift", Category.FACTS),
    (F, "The dog's name is Biscuit", Category.FACTS),
    (E, "my phone number changed to the new one ending in 42", Category.FACTS),
    (F, "The house was built in 1930", Category.FACTS),
    (E, "the router is in the hallway cupboard", Category.FACTS),
    (F, "Ada owns two bicycles", Category.FACTS),
    (E, "my passport expires in 2027", Category.FACTS),
    (F, "The garden shed has a broken lock", Category.FACTS),
    (E, "the boiler was replaced this spring", Category.FACTS),
    # events
    (V, "Sam ran a charity 5k on 7 May 2023", Category.EVENTS),
    (E, "we just got back from our trip to Japan", Category.EVENTS),
    (E, "there was a power cut in the whole street last night", Category.EVENTS),
    (V, "Attended an LGBTQ support group on 8 May", Category.EVENTS),
    (E, "my graduation ceremony is on Saturday", Category.EVENTS),
    (E, "we celebrated our anniversary at a little Italian place", Category.EVENTS),
    (V, "Moved into the new house in March 2022", Category.EVENTS),
    (E, "the concert got cancelled because of the storm", Category.EVENTS),
    (E, "I went to the pride parade last weekend", Category.EVENTS),
    (V, "Caroline gave a talk at a school event on 9 June", Category.EVENTS),
    (E, "our flight was delayed six hours yesterday", Category.EVENTS),
    (E, "the street festival starts next Friday", Category.EVENTS),
    # relationships
    (R, "Ana is Sam's sister", Category.RELATIONSHIPS),
    (E, "my wife and I met at university", Category.RELATIONSHIPS),
    (E, "my dad is coming to stay with us for a while", Category.RELATIONSHIPS),
    (F, "Mel has three kids", Category.RELATIONSHIPS),
    (E, "my best friend Priya is getting married", Category.RELATIONSHIPS),
    (F, "Sam's grandmother raised him", Category.RELATIONSHIPS),
    (E, "my boyfriend and I had a big argument", Category.RELATIONSHIPS),
    (E, "I haven't talked to my brother in two years", Category.RELATIONSHIPS),
    (F, "Ada is divorced and co-parents her son", Category.RELATIONSHIPS),
    (E, "our neighbours watch the cat when we travel", Category.RELATIONSHIPS),
    (E, "my cousin is like a sister to me", Category.RELATIONSHIPS),
    (F, "Tom's parents live in Leeds", Category.RELATIONSHIPS),
    # work
    (F, "Sam works night shifts at the hospital as a nurse", Category.WORK),
    (E, "my manager wants the report by Thursday", Category.WORK),
    (E, "I got the promotion to senior engineer!", Category.WORK),
    (F, "Ada is a freelance translator with four regular clients", Category.WORK),
    (E, "the quarterly review went badly", Category.WORK),
    (E, "I'm thinking of quitting and starting my own business", Category.WORK),
    (E, "my team is migrating the billing system to the cloud", Category.WORK),
    (F, "Mel teaches maths at a secondary school", Category.WORK),
    (E, "I have to present to the board next week", Category.WORK),
    (E, "payroll was late again this month", Category.WORK),
    (F, "Tom's contract ends in December", Category.WORK),
    (E, "my coworker keeps taking credit for my ideas", Category.WORK),
    # health
    (F, "Sam is allergic to peanuts", Category.HEALTH),
    (E, "I sprained my ankle playing football", Category.HEALTH),
    (E, "the dentist said I need a root canal", Category.HEALTH),
    (F, "Ada takes insulin for type 1 diabetes", Category.HEALTH),
    (E, "I've had a headache for three days straight", Category.HEALTH),
    (E, "my therapist suggested journaling", Category.HEALTH),
    (F, "Mel had knee surgery in 2021", Category.HEALTH),
    (E, "I'm trying to cut down on sugar, my cholesterol is high", Category.HEALTH),
    (E, "I tested positive for covid this morning", Category.HEALTH),
    (F, "Tom wears glasses for short-sightedness", Category.HEALTH),
    (E, "my back pain is getting worse", Category.HEALTH),
    (E, "I've been feeling burnt out and exhausted", Category.HEALTH),
    # hobbies
    (F, "Sam plays bass in a jazz trio", Category.HOBBIES),
    (E, "I finished my first watercolour of the harbour", Category.HOBBIES),
    (E, "I've been getting into bouldering at the gym", Category.HOBBIES),
    (F, "Ada collects vintage stamps", Category.HOBBIES),
    (E, "I spent the weekend building a model railway", Category.HOBBIES),
    (E, "I'm halfway through a crochet blanket", Category.HOBBIES),
    (F, "Mel does pottery on Wednesday evenings", Category.HOBBIES),
    (E, "we play Dungeons and Dragons every other Sunday", Category.HOBBIES),
    (E, "I've started birdwatching in the park", Category.HOBBIES),
    (F, "Tom brews his own beer", Category.HOBBIES),
    (E, "I beat my personal best on the 10k", Category.HOBBIES),
    (E, "learning to bake sourdough has been so fun", Category.HOBBIES),
)
