"""/metrics and /readyz after real turns: the observer's backlog and the pack's size."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.store import Message
from tests.conftest import RunningGateway, make_config
from tests.test_metrics import scrape, talk, value


@pytest.fixture
def config(tmp_path: Path) -> Config:
    # No observer pass runs within these few turns (its trigger is far away), and the
    # degraded line is low enough for two short turns to cross it. A short verbatim
    # history leaves the earlier messages to the pack.
    return make_config(
        tmp_path,
        memory={"history_tokens": 24},
        observe={"observer_tokens": 100_000, "backlog_degraded_tokens": 8},
        voice={"enabled": False},
    )


async def test_the_observer_backlog_is_counted_and_makes_readyz_degraded(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    async with running.session.get(running.url("/readyz")) as response:
        assert (await response.json())["status"] == "ok"
    before = await scrape(running.session, running.url("/metrics"))
    assert value(before, "agentgw_observer_backlog_messages") == 0

    await talk(running, brain, ["I moved to Lyon last spring.", "My sister visits on Saturday."])
    async with running.gateway.store.session() as db:
        messages = (await db.scalars(select(Message))).all()
    samples = await scrape(running.session, running.url("/metrics"))
    # Two messages and two replies, none read by the observer yet.
    assert value(samples, "agentgw_observer_backlog_messages") == len(messages) == 4
    assert value(samples, "agentgw_observer_backlog_tokens") == sum(m.tokens for m in messages)
    assert value(samples, "agentgw_observer_backlog_conversations") == 1

    async with running.session.get(running.url("/readyz")) as response:
        body = await response.json()
    assert response.status == 200
    assert body["status"] == "degraded"
    backlog = body["degraded"]["observer_backlog"]
    assert backlog["messages"] == 4
    assert backlog["conversations_over"] == 1
    assert backlog["largest_tokens"] >= backlog["threshold_tokens"] == 8


async def test_the_packs_size_fills_its_histograms(
    running: RunningGateway, brain: ScriptedBrain
) -> None:
    await talk(
        running,
        brain,
        [
            "I moved to Lyon last spring.",
            "My sister Ana visits on Saturday and loves the old town.",
            "The weather has been grey all week, and the trams are late again.",
            "Where did I move to last spring?",
        ],
    )
    samples = await scrape(running.session, running.url("/metrics"))
    # One pack per turn (empty ones too), and the last recalls the first.
    assert value(samples, "agentgw_pack_tokens_count") == 4
    assert value(samples, "agentgw_pack_items_count") == 4
    assert value(samples, "agentgw_pack_tokens_sum") > 0
    assert value(samples, "agentgw_pack_items_sum") >= 1
    # No ids among the labels: the histograms carry only their buckets.
    for name in ("agentgw_pack_tokens_bucket", "agentgw_pack_items_bucket"):
        assert all(set(labels) == {"le"} for labels, _ in samples[name])
