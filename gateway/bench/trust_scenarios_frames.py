"""A held-out set of ``agentgw bench trust``: changes said with verbs no slot rule reads.

Written before the statement frames of memory/frames.py existed (its own commit,
ahead of the mechanism), in other verbs and domains than the dev scenarios of
gateway/bench/trust_scenarios.py (driving, studying, instruments, languages,
commuting, sport, drinks, browsers, doctors, banks, books, teams). Never tuned on:
a miss here is reported, not fixed by a rule written from it.

Two kinds:

- change pairs: an earlier state, then a change in ordinary words; ``current`` and
  ``old`` as in the dev set;
- distractors: two statements with the same verb about different things (a
  different object *and* a different scope, some with a time word such as "now"),
  which are not a change: ``keep`` lists words of both, and neither may be ended.
"""

from __future__ import annotations

from gateway.bench.trust_scenarios import Scenario, _s

SPLIT = "held_out_frames"

CHANGES: tuple[Scenario, ...] = (
    _s(
        "hf-drive",
        ("2024-09-01", "I drive a 2012 Honda Civic to work."),
        ("2025-03-01", "I drive a Tesla now, the Civic finally died."),
        q=("2025-04-01", "What car do I drive?"),
        current="Tesla",
        old="2012 Honda Civic",
        split=SPLIT,
    ),
    _s(
        "hf-instrument",
        ("2024-05-05", "I play bass in a covers band on Fridays."),
        ("2025-02-02", "These days I play drums, the band needed a drummer."),
        q=("2025-03-03", "What instrument do I play?"),
        current="play drums",
        old="bass in a covers band",
        split=SPLIT,
    ),
    _s(
        "hf-study",
        ("2024-10-01", "I study law at Leeds."),
        ("2025-02-01", "I changed course, I study medicine now."),
        q=("2025-03-01", "What do I study?"),
        current="medicine",
        old="law at Leeds",
        split=SPLIT,
    ),
    _s(
        "hf-language",
        ("2024-06-06", "I'm learning Spanish on Duolingo."),
        ("2025-01-10", "I gave up on Spanish, I'm learning Japanese instead."),
        q=("2025-02-10", "Which language am I learning?"),
        current="Japanese",
        old="Spanish on Duolingo",
        split=SPLIT,
    ),
    _s(
        "hf-commute",
        ("2024-04-04", "I take the bus to the office every day."),
        ("2025-04-04", "I cycle to the office now that the bike lane is open."),
        q=("2025-05-05", "How do I get to the office?"),
        current="cycle to the office",
        old="bus to the office",
        split=SPLIT,
    ),
    _s(
        "hf-gym",
        ("2024-08-08", "I go to PureGym on Mondays and Thursdays."),
        ("2025-02-08", "I go to a climbing gym now, PureGym got too crowded."),
        q=("2025-03-08", "Which gym do I go to?"),
        current="climbing gym",
        old="Mondays and Thursdays",
        split=SPLIT,
    ),
    _s(
        "hf-coffee",
        ("2024-03-03", "I drink three coffees a day."),
        ("2025-03-03", "I no longer drink coffee, only green tea."),
        q=("2025-04-04", "How much coffee do I drink?"),
        current="green tea",
        old="three coffees",
        split=SPLIT,
    ),
    _s(
        "hf-browser",
        ("2024-07-07", "I use Firefox on my laptop."),
        ("2025-01-07", "I've moved to Chrome since the update broke my extensions."),
        q=("2025-02-07", "Which browser do I use?"),
        current="Chrome",
        old="Firefox on my laptop",
        split=SPLIT,
    ),
    _s(
        "hf-running",
        ("2024-05-01", "I run 10k every Sunday morning."),
        ("2025-05-01", "I don't run anymore because of my knee, I swim instead."),
        q=("2025-06-01", "Do I still run on Sundays?"),
        current="swim instead",
        old="10k every Sunday",
        split=SPLIT,
    ),
    _s(
        "hf-doctor",
        ("2024-02-02", "My doctor is Dr. Okafor at the Elm Street practice."),
        ("2025-02-02", "My new doctor is Dr. Lindqvist since Okafor retired."),
        q=("2025-03-03", "Who is my doctor?"),
        current="Lindqvist",
        old="Elm Street practice",
        split=SPLIT,
    ),
    _s(
        "hf-bank",
        ("2024-01-15", "My bank is Barclays, I've been with them since uni."),
        ("2025-01-15", "My bank is Monzo these days, the app is so much better."),
        q=("2025-02-15", "Which bank am I with?"),
        current="Monzo",
        old="since uni",
        split=SPLIT,
    ),
    _s(
        "hf-reading",
        ("2025-01-05", "I'm reading Middlemarch at the moment."),
        ("2025-03-05", "I'm reading The Overstory now, Middlemarch can wait."),
        q=("2025-03-20", "What book am I reading?"),
        current="Overstory",
        old="at the moment",
        split=SPLIT,
    ),
    _s(
        "hf-team",
        ("2023-08-01", "I support Arsenal, like my dad."),
        ("2025-08-01", "I support Spurs now, don't tell my dad."),
        q=("2025-09-01", "Which football team do I support?"),
        current="Spurs",
        old="Arsenal, like",
        split=SPLIT,
    ),
)

DISTRACTORS: tuple[Scenario, ...] = (
    _s(
        "hf-not-editor",
        ("2025-01-01", "I use Vim at work."),
        ("2025-02-01", "I use VS Code for notebooks."),
        q=("2025-03-01", "Which editors do I use?"),
        keep=("Vim at work", "VS Code for notebooks"),
        split=SPLIT,
    ),
    _s(
        "hf-not-drinks",
        ("2025-01-01", "I drink coffee in the morning."),
        ("2025-02-01", "I drink chamomile tea in the evening."),
        q=("2025-03-01", "What do I drink?"),
        keep=("coffee in the morning", "chamomile tea"),
        split=SPLIT,
    ),
    _s(
        "hf-not-games",
        ("2025-01-01", "I play tennis on Saturdays."),
        ("2025-02-01", "I play chess online with my brother."),
        q=("2025-03-01", "What do I play?"),
        keep=("tennis on Saturdays", "chess online"),
        split=SPLIT,
    ),
    _s(
        "hf-not-languages",
        ("2025-01-01", "I speak Portuguese at home."),
        ("2025-04-01", "I speak English at work now that the team is international."),
        q=("2025-05-01", "Which languages do I speak?"),
        keep=("Portuguese at home", "English at work"),
        split=SPLIT,
    ),
    _s(
        "hf-not-cars",
        ("2025-01-01", "I drive a van for work."),
        ("2025-02-01", "I drive my wife's Mini at weekends."),
        q=("2025-03-01", "What do I drive?"),
        keep=("van for work", "Mini at weekends"),
        split=SPLIT,
    ),
    _s(
        "hf-not-reading",
        ("2025-01-01", "I read the Guardian every morning."),
        ("2025-02-01", "I read a lot of sci-fi these days."),
        q=("2025-03-01", "What do I read?"),
        keep=("Guardian every morning", "sci-fi"),
        split=SPLIT,
    ),
    _s(
        "hf-not-places",
        ("2025-01-01", "My dentist is in Camden."),
        ("2025-02-01", "My gym is in Islington now."),
        q=("2025-03-01", "Where are my dentist and my gym?"),
        keep=("Camden", "Islington"),
        split=SPLIT,
    ),
)

HELD_OUT_FRAMES: tuple[Scenario, ...] = CHANGES + DISTRACTORS
