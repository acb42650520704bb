"""Labelled messages for the forward-trigger detector (memory/triggers/detect.py).

Every message is read as sent on Wednesday 25 November 2026 (the person's day);
each label is the set of days ahead it should create a trigger for. ``TUNE`` is
what the rules were written and adjusted against; ``HELD_OUT`` was written with
it, before the rules were run on it, and was never used to change them: its
figures are the ones to quote.
"""

from __future__ import annotations

from datetime import date

SENT_ON = date(2026, 11, 25)

Case = tuple[str, tuple[str, ...]]

TUNE: tuple[Case, ...] = (
    ("My job interview is next Friday, wish me luck", ("2026-11-27",)),
    ("I have a dentist appointment on Friday.", ("2026-11-27",)),
    ("We fly to Lisbon on the 12th", ("2026-12-12",)),
    ("Tomorrow at 3 the plumber is coming", ("2026-11-26",)),
    ("We're moving to Porto in 6 months", ("2027-05-25",)),
    ("Next week I start my new job", ("2026-11-30",)),
    ("My sister's wedding is on 19 December", ("2026-12-19",)),
    ("The exam is on 2027-01-15, I need to study", ("2027-01-15",)),
    ("I'll see my parents at Christmas", ("2026-12-24",)),
    ("the day after tomorrow we leave for Rome", ("2026-11-27",)),
    ("I have to finish the report in two weeks", ("2026-12-09",)),
    ("Monday is my first day at the bakery", ("2026-11-30",)),
    ("Remind me to call mum on Sunday", ("2026-11-29",)),
    ("Our anniversary is March 3rd", ("2027-03-03",)),
    ("I'm running a half marathon next Saturday!", ("2026-11-28",)),
    ("Concert this weekend, so excited", ("2026-11-28",)),
    ("I had a great time last Friday", ()),
    ("What did I do on Monday?", ()),
    ("Yesterday I went to the cinema", ()),
    ("I swim every Friday", ()),
    ("Two weeks ago I moved to Porto", ()),
    ("Tonight I'm cooking risotto", ()),
    ("I was supposed to fly tomorrow but they cancelled it", ()),
    ("How was your weekend?", ()),
    ("I met her on 3 June", ()),
    ("Last week was rough", ()),
    ("My birthday party is on the 5th, you're invited", ("2026-12-05",)),
    ("On Friday I went hiking with Tom", ()),
    ("I always go running on Sundays", ()),
    ("The new flat will be ready in three months", ("2027-02-25",)),
    ("Next month we adopt a puppy", ("2026-12-01",)),
    ("The recital is on Friday and then the party is on Saturday", ("2026-11-27", "2026-11-28")),
    ("Is it going to rain tomorrow?", ("2026-11-26",)),
    ("we broke up last Thursday", ()),
    ("I got the job on Monday", ()),
    ("the surgery is scheduled for 4 January", ("2027-01-04",)),
    ("My appointment is on 3000-01-01", ()),
    ("Grandma turns 90 on 1 January 2027", ("2027-01-01",)),
    ("see you in 5 days", ("2026-11-30",)),
    ("This morning I had coffee with Ana", ()),
)

HELD_OUT: tuple[Case, ...] = (
    ("My driving test is next Tuesday, I'm so nervous", ("2026-12-01",)),
    ("We're getting married on 20 June 2027!", ("2027-06-20",)),
    ("Thursday I have a big presentation at work", ("2026-11-26",)),
    ("I need to renew my passport before the trip on the 18th", ("2026-12-18",)),
    ("My brother arrives tomorrow morning", ("2026-11-26",)),
    ("In 3 weeks we go to Japan", ("2026-12-16",)),
    ("The kids' school play is on Saturday", ("2026-11-28",)),
    ("I start chemo next month", ("2026-12-01",)),
    ("Final exam on December 10, wish me luck", ("2026-12-10",)),
    ("We'll celebrate at New Year's Eve with friends", ("2026-12-31",)),
    ("a year from now I'll have my degree", ("2027-11-25",)),
    ("I'm visiting the vet on Monday with Rex", ("2026-11-30",)),
    ("My mother's surgery is the day after tomorrow", ("2026-11-27",)),
    ("The deadline for the grant is 2026-12-15", ("2026-12-15",)),
    ("Last Saturday we went to the zoo", ()),
    ("I ran 10k on Sunday", ()),
    ("Did I tell you what happened on Tuesday?", ()),
    ("Every Monday I do yoga", ()),
    ("I graduated in June", ()),
    ("Three days ago my cat got sick", ()),
    ("Yesterday was my birthday", ()),
    ("Today I finally finished the book", ()),
    ("We visited Rome on 2 October", ()),
    ("What did we talk about last week?", ()),
    ("My flight was delayed on Friday", ()),
    ("The meeting with the landlord is on Thursday at 10", ("2026-11-26",)),
    ("I usually call my dad on Sundays", ()),
    ("I'll be in Berlin next weekend", ("2026-12-05",)),
    ("Back in 2019 I lived in Paris", ()),
    ("Our trip to Iceland is in 2 months", ("2027-01-25",)),
)
