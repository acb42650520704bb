"""Budget-aware memory (issue 22): per-turn cost, the month's mode, its readers.

Real turns through the app (fake Claude on loopback returning usage, real
store, a bag-of-words embedder so the dense path runs), the budget's clock
replaced by a fake one to cross into the next month.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from numpy.typing import NDArray
from sqlalchemy import func, insert, select

from gateway.app import create_app
from gateway.brains.claude import ClaudeBrain
from gateway.budget import BudgetMode, BudgetState
from gateway.clock import local
from gateway.config import Config, load_config
from gateway.errors import ConfigError
from gateway.prices import DEFAULT_PRICES, check_prices, cost_usd, price_of
from gateway.runtime import GATEWAY
from gateway.store import Store, Turn
from gateway.store.cost_models import BudgetModeChange, TurnCost
from gateway.testing.fake_anthropic import FakeAnthropic
from memory import repo
from memory.models import MemoryItem
from tests.conftest import make_config
from web.panel.cost import COSTS

KEY = "sk-ant-budget-key"
MODEL = "claude-sonnet-5-5"
DIM = 64


class HashEmbedder:
    """Deterministic bag of words: texts sharing words get close vectors."""

    model_name = "hash-64"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
            out[row] /= float(np.linalg.norm(out[row])) or 1.0
        return out


class FakeClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


# -- the price table ------------------------------------------------------------


def test_the_cost_is_the_price_table_arithmetic() -> None:
    prices = {"m": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}}
    usd = cost_usd(
        prices,
        "m",
        input_tokens=1000,
        output_tokens=200,
        cache_read_tokens=5000,
        cache_write_tokens=400,
    )
    assert usd == pytest.approx((1000 * 3.0 + 200 * 15.0 + 5000 * 0.3 + 400 * 3.75) / 1e6)
    assert (
        cost_usd(
            prices,
            "other",
            input_tokens=1,
            output_tokens=1,
            cache_read_tokens=0,
            cache_write_tokens=0,
        )
        is None
    )


def test_a_dated_model_name_takes_the_longest_prefix() -> None:
    assert price_of(DEFAULT_PRICES, "claude-opus-4-5-20251101") == DEFAULT_PRICES["claude-opus-4-5"]
    assert price_of(DEFAULT_PRICES, "claude-opus-4-1-20250805") == DEFAULT_PRICES["claude-opus-4"]


@pytest.mark.parametrize(
    ("table", "names"),
    [
        ('"m" = { input = -1.0, output = 1.0, cache_read = 0.1, cache_write = 1.0 }', "m.input"),
        (
            '"m" = { input = 1.0, output = 1.0, cache_read = 0.1, cache_write = 1.0, inptu = 2 }',
            "m.inptu",
        ),
        ('"m" = { input = "cheap", output = 1.0, cache_read = 0.1, cache_write = 1.0 }', "m.input"),
        ('"m" = { input = 1.0, output = 1.0, cache_read = 0.1 }', "m.cache_write"),
        ('"m" = { input = 1.0, output = true, cache_read = 0.1, cache_write = 1.0 }', "m.output"),
        ('"m" = 3.0', "budget.prices.m"),
    ],
)
def test_a_malformed_price_table_is_a_clear_error(tmp_path: Path, table: str, names: str) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text(f"[budget]\nmonthly_usd = 5.0\n[budget.prices]\n{table}\n", encoding="utf-8")
    before = {k: dict(v) for k, v in DEFAULT_PRICES.items()}
    with pytest.raises(
        ConfigError, match=rf"budget\.prices\.{re.escape(names.removeprefix('budget.prices.'))}"
    ):
        load_config(path, env={})
    # Nothing changed: the defaults are intact and a good table still loads.
    assert before == DEFAULT_PRICES
    path.write_text(
        '[budget]\n[budget.prices]\n"m" = { input = 1, output = 2, cache_read = 0, '
        "cache_write = 1 }\n",
        encoding="utf-8",
    )
    assert load_config(path, env={}).budget.prices == {
        "m": {"input": 1.0, "output": 2.0, "cache_read": 0.0, "cache_write": 1.0}
    }


def test_a_price_table_from_the_environment_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"budget\.prices: a table of models"):
        load_config(None, env={"AGENTGW_BUDGET__PRICES": "cheap"})
    with pytest.raises(ConfigError, match="non-empty"):
        check_prices("budget.prices", {"": {}})


# -- the mode -------------------------------------------------------------------


def test_thresholds_switch_the_mode_and_a_new_month_switches_it_back() -> None:
    # The month is counted in agent.timezone: 02:00 UTC on 1 Dec is still November there.
    zone = ZoneInfo("America/Los_Angeles")
    clock = FakeClock(datetime(2026, 11, 20, 12, tzinfo=UTC))
    state = BudgetState(10.0, zone, clock=clock)
    seen: list[tuple[str, str]] = []
    state.listeners.append(lambda c: seen.append((c.previous.value, c.mode.value)))
    state.start_month("2026-11", 0.0)
    assert state.add(7.9, clock.now) == []
    assert state.current() is BudgetMode.NORMAL
    state.add(0.2, clock.now)
    assert state.current() is BudgetMode.TIGHT
    assert state.pack_tokens(BudgetMode.TIGHT, 1000) == 500
    assert not state.dense(BudgetMode.TIGHT)
    assert not state.models(BudgetMode.TIGHT)
    state.add(0.1, clock.now)  # still tight: no second change
    state.add(2.0, clock.now)
    assert state.current() is BudgetMode.OVER
    assert state.pack_tokens(BudgetMode.OVER, 1000) == 250
    clock.now = datetime(2026, 12, 1, 2, tzinfo=UTC)
    assert state.current() is BudgetMode.OVER
    clock.now = datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert state.current() is BudgetMode.NORMAL
    assert state.spent_usd == 0.0
    assert seen == [("normal", "tight"), ("tight", "over"), ("over", "normal")]


def test_no_budget_is_always_normal() -> None:
    state = BudgetState(0.0, UTC)
    state.start_month("2026-11", 0.0)
    state.add(1e6, datetime(2026, 11, 2, tzinfo=UTC))
    assert state.current() is BudgetMode.NORMAL


# -- real turns -----------------------------------------------------------------


@dataclass
class Running:
    server: TestServer
    session: aiohttp.ClientSession
    fake: FakeAnthropic
    clock: FakeClock

    @property
    def store(self) -> Store:
        return self.server.app[GATEWAY].store


async def seed_spend(config: Config, usd: float, at: datetime) -> None:
    """Spend of earlier this month, as the meter would have stored it."""
    async with Store(config.database_url) as store, store.session() as session:
        await session.execute(
            insert(TurnCost).values(
                day=local(at, config.zone).date(), at=at, channel="webchat", cost_usd=usd
            )
        )


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=KEY, chunk_chars=8) as server:
        yield server


async def start(tmp_path: Path, fake: FakeAnthropic, spent: float, **budget: Any) -> Running:
    config = make_config(
        tmp_path,
        brain={"timeout_s": 5.0, "max_retries": 0},
        claude={"reply_model": MODEL, "utility_model": "claude-haiku-5-5"},
        # Every message outside the verbatim history: the pack holds the earlier turns.
        memory={"history_tokens": 1},
        persona={"judge": "llm"},
        observe={"observer": "llm"},
        budget={"monthly_usd": 1.0, **budget},
    ).replace(anthropic_api_key=KEY, anthropic_base_url=fake.base_url)
    now = datetime.now(UTC)
    await seed_spend(config, spent, now)
    brain = ClaudeBrain.from_config(config)
    server = TestServer(create_app(config, brain=brain, embedder=HashEmbedder()), host="127.0.0.1")
    await server.start_server()
    await server.app[GATEWAY].ready.wait()
    clock = FakeClock(now)
    server.app[COSTS].state.clock = clock
    return Running(server, aiohttp.ClientSession(), fake, clock)


@pytest.fixture
async def stopper() -> AsyncIterator[list[Running]]:
    started: list[Running] = []
    yield started
    for running in started:
        await running.session.close()
        await running.server.close()


async def say(running: Running, text: str) -> int:
    """One turn through the webchat; its turn id once its cost is stored."""
    ws = await running.session.ws_connect(str(running.server.make_url("/ws?session=budget-1")))
    try:
        while (await ws.receive_json(timeout=5))["type"] != "history":
            pass
        await ws.send_json(
            {"type": "message", "text": text, "client_id": hashlib.md5(text.encode()).hexdigest()}
        )
        while (frame := await ws.receive_json(timeout=10))["type"] != "reply":
            assert frame["type"] != "error", frame
    finally:
        await ws.close()
    gateway = running.server.app[GATEWAY]
    assert await gateway.router.drain(30)
    await running.server.app[COSTS].settled()
    async with running.store.reader() as session:
        return int(await session.scalar(select(Turn.id).order_by(Turn.id.desc()).limit(1)))


async def cost_row(running: Running, turn_id: int) -> TurnCost:
    async with running.store.reader() as session:
        row = await session.scalar(select(TurnCost).where(TurnCost.turn_id == turn_id))
    assert row is not None
    return row


async def test_a_turns_cost_is_its_usage_priced_by_the_table(
    tmp_path: Path, fake: FakeAnthropic, stopper: list[Running]
) -> None:
    running = await start(tmp_path, fake, 0.0)
    stopper.append(running)
    fake.script = ["Nice to meet you, Sam."] * 10
    turn_id = await say(running, "Hi, I'm Sam and I keep bees in my garden.")
    row = await cost_row(running, turn_id)
    async with running.store.reader() as session:
        turn = await session.get(Turn, turn_id)
    assert turn is not None
    assert turn.model == MODEL
    assert turn.input_tokens > 0
    price = DEFAULT_PRICES[MODEL]
    expected = (
        turn.input_tokens * price["input"]
        + turn.output_tokens * price["output"]
        + turn.cache_read_tokens * price["cache_read"]
        + turn.cache_write_tokens * price["cache_write"]
    ) / 1e6
    assert (row.input_tokens, row.output_tokens) == (turn.input_tokens, turn.output_tokens)
    assert row.cost_usd == pytest.approx(expected)
    assert row.cost_usd > 0
    # The turn's own work is measured: a pack ran, its query was embedded, the store read.
    assert row.pack_ms > 0
    assert row.db_calls > 0
    assert row.db_ms > 0
    assert row.embed_calls >= 1
    assert row.mode == "normal"
    assert row.person_id is not None
    metrics = await (await running.session.get(running.server.make_url("/metrics"))).text()
    counted = re.search(rf'agentgw_cost_usd_total{{model="{MODEL}"}} (\S+)', metrics)
    assert counted is not None
    assert float(counted.group(1)) == pytest.approx(row.cost_usd)


async def trace_of(running: Running, turn_id: int) -> Any:
    memory = running.server.app[GATEWAY].memory
    assert memory is not None
    await memory.traces_saved(turn_id)
    trace = await repo.trace_for_turn(running.store, turn_id)
    assert trace is not None
    return trace


async def strengths(running: Running, ids: Sequence[int]) -> dict[int, float]:
    async with running.store.reader() as session:
        rows = (
            await session.execute(
                select(MemoryItem.id, MemoryItem.strength).where(MemoryItem.id.in_(ids))
            )
        ).all()
    return {item_id: strength for item_id, strength in rows}


async def test_past_80_percent_the_pack_halves_skips_dense_and_models_until_the_month_ends(
    tmp_path: Path, fake: FakeAnthropic, stopper: list[Running], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.budget")
    # Just under 80 %: the first turn's cost crosses the line.
    running = await start(tmp_path, fake, 0.79995)
    stopper.append(running)
    gateway = running.server.app[GATEWAY]
    loop = gateway.persona
    assert loop is not None
    fake.script = ["Lovely."] * 40
    first = await say(running, "My sister Clara plays the violin in an orchestra.")
    assert (await cost_row(running, first)).mode == "normal"
    normal = await trace_of(running, first)
    assert normal.budget_tokens == 1000
    assert normal.notes["dense"] is True
    assert running.server.app[COSTS].state.mode is BudgetMode.TIGHT
    # The judge and the observer now run without a model.
    assert loop.scorer.judge.name == "local"
    assert loop.observe_pass.observer.name.startswith("rule")
    second = await say(running, "Any tips for practising violin at home?")
    tight = await trace_of(running, second)
    assert tight.budget_tokens == 500
    assert tight.notes["dense"] is False
    assert tight.notes["budget_mode"] == "tight"
    assert (await cost_row(running, second)).embed_calls == 0
    await say(running, "Another violin question for you.")
    # Logged and recorded once, not each turn.
    switches = [r for r in caplog.records if "normal -> tight" in r.getMessage()]
    assert len(switches) == 1
    # The month ends: back to normal at its first turn.
    running.clock.now = (running.clock.now.replace(day=1) + timedelta(days=32)).replace(day=1)
    assert loop.scorer.judge.name.startswith("llm")
    third = await say(running, "And how is Clara doing with the violin?")
    back = await trace_of(running, third)
    assert back.budget_tokens == 1000
    assert back.notes["dense"] is True
    async with running.store.reader() as session:
        changes = (
            await session.execute(
                select(BudgetModeChange.previous, BudgetModeChange.mode).order_by(
                    BudgetModeChange.id
                )
            )
        ).all()
    assert [tuple(c) for c in changes] == [("normal", "tight"), ("tight", "normal")]
    page = await running.session.get(running.server.make_url("/api/cost"))
    data = await page.json()
    assert [c["mode"] for c in data["changes"]] == ["normal", "tight"]


async def test_a_tight_budget_makes_ignored_memories_lose_strength(
    tmp_path: Path, fake: FakeAnthropic, stopper: list[Running]
) -> None:
    running = await start(tmp_path, fake, 0.9)
    stopper.append(running)
    assert running.server.app[COSTS].state.mode is BudgetMode.TIGHT
    fake.script = ["Lovely."] * 10
    await say(running, "My sister Clara plays the violin in an orchestra.")
    gateway = running.server.app[GATEWAY]
    memory = gateway.memory
    assert memory is not None
    second = await say(running, "Any tips for practising violin at home?")
    trace = await trace_of(running, second)
    before = await strengths(running, trace.kept_ids)
    # The after-turn reinforcement ran in the turn; read what it left.
    assert trace.kept_ids
    ignored = [i for i in trace.kept_ids if before[i] < 0]
    budget = running.server.app[COSTS].state
    assert ignored, before
    assert all(before[i] == pytest.approx(-budget.tight_fizzle) for i in ignored)


async def test_past_the_budget_replies_still_go_out_with_the_smallest_pack(
    tmp_path: Path, fake: FakeAnthropic, stopper: list[Running]
) -> None:
    running = await start(tmp_path, fake, 1.5)
    stopper.append(running)
    assert running.server.app[COSTS].state.mode is BudgetMode.OVER
    fake.script = ["Still here."] * 10
    turn_id = await say(running, "Are you still answering?")
    trace = await trace_of(running, turn_id)
    assert trace.budget_tokens == 250
    assert trace.notes["dense"] is False
    assert (await cost_row(running, turn_id)).mode == "over"


# -- utility-model calls ----------------------------------------------------------------


async def test_a_utility_call_raises_the_months_spend_and_is_stored(
    tmp_path: Path, fake: FakeAnthropic, stopper: list[Running]
) -> None:
    """The judge's, the observer's, the weekly job's calls go to the utility model
    outside the turn's accounting: each is priced, counted in the month and stored."""
    from gateway.brains.base import BrainRequest, ChatMessage, Purpose
    from gateway.costs import UTILITY_CHANNEL

    running = await start(tmp_path, fake, 0.0)
    stopper.append(running)
    meter = running.server.app[COSTS]
    before = meter.state.spent_usd
    fake.script = ['{"verdict": "fine"}']
    brain = running.server.app[GATEWAY].brain
    completion = await brain.complete(
        BrainRequest(
            system=(),
            messages=(ChatMessage("user", "Sort this memory into a category."),),
            purpose=Purpose.UTILITY,
            max_tokens=50,
        )
    )
    await meter.settled()
    assert completion.model == "claude-haiku-5-5"
    price = DEFAULT_PRICES["claude-haiku-5-5"]
    expected = (
        completion.usage.input_tokens * price["input"]
        + completion.usage.output_tokens * price["output"]
        + completion.usage.cache_read_tokens * price["cache_read"]
        + completion.usage.cache_write_tokens * price["cache_write"]
    ) / 1e6
    assert expected > 0
    assert meter.state.spent_usd - before == pytest.approx(expected)
    async with running.store.reader() as session:
        rows = (
            await session.scalars(select(TurnCost).where(TurnCost.channel == UTILITY_CHANNEL))
        ).all()
    assert [(r.turn_id, r.model) for r in rows] == [(None, "claude-haiku-5-5")]
    assert rows[0].cost_usd == pytest.approx(expected)
    # A reply's stream is the turn's to price, not counted twice here.
    fake.script = ["Hello there."] * 10
    turn_id = await say(running, "Hello!")
    async with running.store.reader() as session:
        total = await session.scalar(select(func.sum(TurnCost.cost_usd)))
        utility = (
            await session.scalars(
                select(TurnCost.cost_usd).where(TurnCost.channel == UTILITY_CHANNEL)
            )
        ).all()
    assert (await cost_row(running, turn_id)).cost_usd > 0
    # The judge and the observer of that turn are utility calls too: more rows.
    assert len(utility) >= 1
    assert meter.state.spent_usd == pytest.approx(float(total or 0.0))
