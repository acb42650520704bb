"""Salience (an episode's stored priority) and the searched text without speakers' names."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from gateway.store import Store
from memory import repo
from memory.pack import search_text
from memory.salience import salience
from tests.conftest import database_at


@pytest.mark.parametrize(
    ("glue", "account"),
    [
        (
            "Thanks, Gina! See you at the event!",
            "Yesterday I signed the lease for my dance studio.",
        ),
        ("How's it going?", "I've been training for the Berlin marathon since May."),
        ("Go get 'em, Jon!", "My sister Ana moved to Lisbon last year and works as a nurse."),
        ("Wow, that sounds amazing! What was it like?", "We adopted a grey cat called Miso."),
    ],
)
def test_a_first_person_account_outranks_glue(glue: str, account: str) -> None:
    assert salience(account) > salience(glue) + 0.2


def test_salience_is_bounded_and_empty_text_has_none() -> None:
    assert salience("") == 0.0
    assert salience("   ") == 0.0
    long_account = (
        "Last week I drove to Portland with my brother Tom. We hiked Forest Park on Monday, "
        "and I finally finished the novel I started in January. I'm so proud of us."
    )
    assert 0.9 <= salience(long_account) <= 1.0


def test_a_question_discloses_nothing_even_in_the_first_person() -> None:
    question = "Do you think I should take the job in Berlin next month?"
    statement = "I think I should take the job in Berlin next month."
    assert salience(statement) > salience(question)


def test_search_text_leaves_out_the_speakers_names() -> None:
    names = ["Gina", "Jon"]
    assert (
        search_text("What offer does Gina make to Jon regarding social media?", names)
        == "What offer does make to regarding social media?"
    )
    # Possessives and any case; names inside other words stay.
    assert search_text("what is gina's shop called?", names) == "what is shop called?"
    assert search_text("Did Jonathan call?", names) == "Did Jonathan call?"


def test_search_text_keeps_a_message_that_is_only_names() -> None:
    assert search_text("Jon?", ["Jon"]) == "Jon?"
    assert search_text("anything new", []) == "anything new"


async def test_migration_0007_scores_episodes_stored_before_salience(tmp_path: Path) -> None:
    with database_at(tmp_path / "old.db", "0006") as connection:
        rows = [
            (1, "Thanks!", 0.0),
            (2, "Yesterday I signed the lease for my dance studio in Lisbon.", 0.0),
            (3, "Set by hand in the panel.", 0.9),
        ]
        for item_id, content, priority in rows:
            connection.execute(
                text(
                    "INSERT INTO memory_items (id, person_id, type, content, speaker, role, "
                    "author, channel, source_message_ids, source_ref, priority, confidence, "
                    "status, tier, strength, access_count, created_at, occurred_at, "
                    "embedding_model) VALUES (:id, 1, 'episode', :content, 'Sam', 'user', "
                    "'user', 'webchat', '[]', '', :priority, 1.0, 'active', 'active', 0, 0, "
                    "'2024-01-01 00:00:00', '2024-01-01 00:00:00', '')"
                ),
                {"id": item_id, "content": content, "priority": priority},
            )

    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}") as store:
        items = {item.id: item for item in await repo.get_items(store, [1, 2, 3])}
    assert items[1].priority == salience("Thanks!")
    assert items[2].priority == salience(rows[1][1]) > 0.5
    assert items[3].priority == 0.9  # a priority someone set is kept
