"""Changes said in other words (memory/changes.py): a change cue in the speaker's own
clause ends their older statement of the same kind of slot or naming the thing it
changed; someone else's change, the past, a wish, an addition or a visit end nothing.
The sentences are not the bench's (gateway/bench/trust_scenarios_lockbox2.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory.changes import change_of, ends
from memory.service import MemoryService
from tests.test_memory_frames import ended_contents
from tests.test_memory_trust import T0, embedder, say, service

__all__ = ["embedder", "service"]  # fixtures, used by name


def ended_by(newer: str, older: str) -> bool:
    change = change_of(newer)
    return change is not None and ends(change, older)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("We rent a little place... a flat above a bakery in Cork.", "Settled in Galway at last."),
        ("I'm in Leeds, Headingley, with flatmates.", "Since we relocated to York I sleep better."),
        ("I'm at Unilever doing supply chain stuff.", "First day at Nestle tomorrow, nervous!"),
        ("I'm a line cook at Dishoom.", "Got the sous chef job at Hawksmoor!"),
        ("My boyfriend Arjun is cooking tonight.", "Arjun and I split up last week."),
        ("I've been seeing Tom for a year.", "Things fizzled out with Tom, it's fine."),
        ("Our puppy is called Biscuit for now.", "Final answer on the puppy: he's Pretzel."),
        ("My youngest, Katherine, loves maths.", "My youngest goes by Kit now."),
        ("My favourite band is Blur.", "Honestly Pulp have overtaken Blur as my favourite band."),
        ("Our wedding is on 4 May in Bath.", "The wedding's been postponed to June."),
        ("My dentist appointment is on 2 March.", "My appointment got rescheduled."),
        ("We plan everything in Trello at work.", "We ditched Trello for Asana in spring."),
        ("I'm doing paleo this month.", "Gave up on paleo, eating normally again."),
        ("I work at Boots on the pharmacy counter.", "Started at Superdrug on Monday."),
        ("My favourite show is Succession.", "My new favourite show is Severance."),
        ("Our wedding is on 3 June.", "The wedding is now on the 10th."),
        ("I play cello in the Hackney orchestra.", "I quit the orchestra after the tour."),
    ],
)
def test_a_change_in_other_words_ends_the_older_statement(older: str, newer: str) -> None:
    assert ended_by(newer, older)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        # someone else changed
        ("I live in Utrecht, near the station.", "My sister just moved into a flat in Delft."),
        ("I'm an accountant at KPMG.", "My husband started a new job at Deloitte."),
        ("My girlfriend Mia is lovely.", "My mate Joe and his girlfriend broke up."),
        ("Our cat is called Pepper.", "My neighbour's kitten is called Salt, final answer."),
        ("My brother lives in a flat in Leeds.", "Finally settled in York after the move."),
        ("My kids love the park.", "We moved into a new house, the kids have their own rooms."),
        # the past
        ("I live in Bristol.", "Back when I relocated to Bath I hated it."),
        ("I'm a nurse at the Royal.", "I used to hate my old job, I left it gladly."),
        # a wish or an offer
        ("I'm an auditor at PwC.", "If the EY offer comes through I'd take the job."),
        ("I live in Derby.", "Thinking about a new flat in Nottingham."),
        ("I live in Derby.", "I'm going to relocate to Leeds next year."),
        # an addition
        ("My favourite film is Alien.", "I've taken up Aliens as a favourite too."),
        ("I'm a nurse at the Royal.", "I've signed with Pulse too, for extra shifts."),
        # a visit
        ("I live in Oslo.", "Staying at my brother's new place in Bergen for three weeks."),
        ("We rent a flat in Oslo.", "Moved into a cabin in Geilo for two weeks of skiing."),
        # the cue about another thing
        ("I live in Leeds, near the uni.", "I've moved to Firefox since Chrome got slow."),
        ("We live in Bath.", "We moved to a four-day week at work."),
        ("I work at Tesco on the tills.", "The bakery section no longer does bagels."),
        ("I work at Boots.", "Started at 9 today, long shift."),
        # "now" and "finally" alone say nothing of what changed
        ("I'm so busy with the kids and my job.", "I finally took my kids to the zoo."),
        # the cue's words in another sense, or about another thing
        ("I live in Paris, in the 11th.", "We left Paris yesterday after a lovely week."),
        ("I work at Google on search.", "I left Google Docs open all night lol."),
        ("I work at Acme as a nurse.", "Signed with a new agent for my novel!"),
        ("I live in Leeds.", "Finally settled in to the new routine."),
        ("I drive a Golf.", "Just swapped the tyres on the Golf."),
        ("I rent a flat in Bristol.", "Moved out the old sofa at last."),
        ("I work at Tesco.", "First week at the gym done, legs are dead."),
        ("I work at Tesco.", "Took the job of cleaning the garage this weekend."),
        ("I work at the BBC.", "I got the job of best man at Tom's wedding."),
        ("I work at Tesco, on tills.", "Qualified for the half marathon!"),
        ("I live in Leeds.", "Moved back the meeting to Friday."),
        ("I live in a flat in Leeds.", "The neighbours moved out at last."),
        # the same said again
        ("My favourite film is Heat.", "Watched Heat, still my favourite now."),
        # a month named with a change is no thing of the older's
        ("I go swimming in July.", "Gave up on the gym in July."),
    ],
)
def test_what_is_no_change_of_the_older_statement_ends_nothing(older: str, newer: str) -> None:
    assert not ended_by(newer, older)


def test_a_plan_ends_only_the_plan_of_its_event() -> None:
    assert ended_by("The party got bumped to Friday.", "Our party is on Saturday.")
    assert not ended_by("The party got bumped to Friday.", "My exam is on Monday.")


def test_a_favourite_ends_only_the_favourite_of_its_thing() -> None:
    newer = "Ramen has overtaken pizza as my favourite food."
    assert ended_by(newer, "My favourite food is pizza.")
    assert not ended_by(newer, "My favourite band is Blur.")


@pytest.mark.slow
async def test_through_the_service_a_change_in_other_words_ends_only_its_own_thing(
    service: MemoryService,
) -> None:
    """The real write path: no rule or frame reads these changes; the fallback ends
    the older statements of the same thing and nothing else."""
    await say(service, "We rent a tiny flat in Cork, top floor.", T0)
    await say(service, "I sing bass in the Camden community choir.", T0 + timedelta(days=1))
    await say(service, "My favourite band is Blur, always has been.", T0 + timedelta(days=2))
    await say(service, "Finally settled in Galway after the move.", T0 + timedelta(days=100))
    await say(service, "I quit the choir after the concert.", T0 + timedelta(days=101))
    ended = await ended_contents(service)
    assert "We rent a tiny flat in Cork, top floor." in ended
    assert "I sing bass in the Camden community choir." in ended
    assert "My favourite band is Blur, always has been." not in ended
