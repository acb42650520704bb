"""The work of ``agentgw bench upkeep`` (issue 21): LoCoMo replayed on a simulated calendar.

Every session of every ``conv-*.json`` is stored at its real date, in date order
across the conversations, by ``bench locomo``'s own replay (one session at a
time). A ``SimulatedClock`` drives the real ``UpkeepCalendar`` with the bodies
of ``job_bodies(config)``: the clock steps to every scheduled time of each job
but the hourly one and to every session's start, and ``catch_up()`` runs there
what is due (the hourly job, at most once a step, catches up there too: it has
nothing of its own to do between two steps). So the calendar passes months of
nightly, weekly and monthly runs, each over the memory as it stood that day.

Recall is then measured by ``bench locomo``'s ``evaluate`` (same questions, same
budget, same rule), every question asked a day after the last session of all,
against the same replay without any job (``recall_without_upkeep``), in the same
run. Last, the clock jumps five weeks (a gateway down that long): the status says
how many periods each job missed, and one catch-up must run each job once.

The observer: both replays run the rules observer (no model) as the gateway does
after a turn, a pass when a conversation's unread messages reach
``observe.observer_tokens`` (here after each session); what is left unread is the
nightly's extraction catch-up (``observer_extractor``), in the upkeep replay only.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from gateway.bench import locomo_bench
from gateway.bench.locomo_bench import Conversation, Turn, evaluate, load_conversation
from gateway.bench.report import progress
from gateway.brains.offline import OfflineBrain
from gateway.config import Config
from gateway.context import load_persona
from gateway.store import Store
from gateway.store.repo import resolve_address
from gateway.supervisor import TaskSupervisor
from memory.embed import Embedder
from memory.jobs.base import Counts, Extractor, JobBody, JobContext
from memory.jobs.calendar import RunRecord, SimulatedClock, UpkeepCalendar
from memory.jobs.registry import job_bodies
from memory.models import MemoryItem
from memory.service import MemoryService
from memory.types import ItemStatus
from persona.build import build_persona_loop
from persona.loop import PersonaLoop
from persona.observation.backlog import observer_extractor
from persona.observation.sink import MemorySink

DOWNTIME = timedelta(weeks=5)
# The job that catches up at every step rather than being stepped to (24 a day).
UNSTEPPED = frozenset({"hourly"})


@dataclass(frozen=True)
class Session:
    conversation: Conversation
    turns: tuple[Turn, ...]

    @property
    def at(self) -> datetime:
        return self.turns[0].at


def sessions_of(conversations: Sequence[Conversation]) -> list[Session]:
    """Every session of every conversation (a turn's ``dia_id`` "D3:7" is session 3),
    oldest first."""
    found: list[Session] = []
    for conversation in conversations:
        by_session: dict[str, list[Turn]] = defaultdict(list)
        for turn in conversation.turns:
            by_session[turn.dia_id.split(":", 1)[0]].append(turn)
        found.extend(Session(conversation, tuple(turns)) for turns in by_session.values())
    return sorted(found, key=lambda s: (s.at, s.conversation.name))


@dataclass
class JobTally:
    """What the calendar's runs did, from its ``on_run`` and timed around each body."""

    runs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def record(self, run: RunRecord) -> None:
        self.runs[run.job] += 1
        if run.error:
            self.failed[run.job].append(run.error)
        summed = self.counts.setdefault(run.job, {})
        for key, value in run.counts.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                summed[key] = summed.get(key, 0) + value

    def timed(self, bodies: Mapping[str, JobBody]) -> dict[str, JobBody]:
        """The same bodies, each run timed on the wall clock (the calendar's own run
        times are the simulated clock's)."""

        def wrap(name: str, body: JobBody) -> JobBody:
            async def run(ctx: JobContext) -> Counts:
                began = time.perf_counter()
                try:
                    return await body(ctx)
                finally:
                    self.seconds[name].append(time.perf_counter() - began)

            return run

        return {name: wrap(name, body) for name, body in bodies.items()}

    def total(self, key: str) -> float:
        return sum(counts.get(key, 0) for counts in self.counts.values())

    def seconds_summary(self) -> dict[str, dict[str, float]]:
        return {
            name: {
                "p50": round(statistics.median(values), 3),
                "max": round(max(values), 3),
                "total": round(sum(values), 1),
            }
            for name, values in self.seconds.items()
            if values
        }


@dataclass
class Replay:
    """One replay's store, memory, calendar (None: no upkeep) and people."""

    store: Store
    service: MemoryService
    supervisor: TaskSupervisor
    loop: PersonaLoop | None
    clock: SimulatedClock
    calendar: UpkeepCalendar | None
    tally: JobTally
    people: dict[str, int] = field(default_factory=dict)
    conversation_ids: dict[str, int] = field(default_factory=dict)

    async def aclose(self) -> None:
        if self.loop is not None:
            await self.loop.idle(120)
        await self.supervisor.aclose()
        await self.service.aclose()
        await self.store.close()


async def open_replay(
    config: Config, embedder: Embedder, start: datetime, *, upkeep: bool, observe: bool
) -> Replay:
    store = Store(config.database_url)
    await store.open()
    service = MemoryService(store, config.memory, config.data_dir / "memory-index", embedder)
    supervisor = TaskSupervisor()
    loop: PersonaLoop | None = None
    if observe:
        persona_text = await asyncio.to_thread(
            load_persona, config.agent.persona_file, config.agent.name
        )
        # The offline brain is no model: the observer is the rule-based one, no call made.
        loop = await asyncio.to_thread(
            build_persona_loop,
            config,
            store,
            OfflineBrain(),
            supervisor,
            persona_text=persona_text,
            sink=MemorySink(service),
            embedder=embedder,
        )
    clock = SimulatedClock(start)
    tally = JobTally()
    calendar = None
    if upkeep:
        extractors: list[Extractor] = [observer_extractor(loop)] if loop is not None else []
        calendar = UpkeepCalendar(
            store,
            service,
            config.upkeep,
            config.zone,
            tally.timed(job_bodies(config)),
            clock=clock,
            extractors=extractors,
            on_run=tally.record,
        )
        await calendar.prepare()
    return Replay(store, service, supervisor, loop, clock, calendar, tally)


def next_job_time(calendar: UpkeepCalendar, now: datetime) -> datetime | None:
    times = [s.next(now) for name, s in calendar.schedules.items() if name not in UNSTEPPED]
    return min(times, default=None)


async def advance(replay: Replay, until: datetime) -> None:
    """Move the clock to ``until``, stopping at every scheduled time on the way to run
    what is due there; the catch-up at ``until`` too."""
    calendar = replay.calendar
    if calendar is None:
        replay.clock.now = until
        return
    while (step := next_job_time(calendar, replay.clock.now)) is not None and step < until:
        replay.clock.now = step
        await calendar.catch_up()
    replay.clock.now = until
    await calendar.catch_up()


async def store_session(replay: Replay, session: Session) -> None:
    """The session's turns stored (bench locomo's replay), then the observer's pass if
    the conversation's unread messages reached its threshold, as after a turn."""
    conversation = session.conversation
    person_id = await locomo_bench.replay(
        replay.store, replay.service, dataclasses.replace(conversation, turns=session.turns)
    )
    replay.people[conversation.name] = person_id
    if replay.loop is not None:
        address = await resolve_address(
            replay.store, "locomo", conversation.name, display_name=conversation.speaker_a
        )
        await replay.loop.observe_pass.run(address.conversation_id, person_id)


async def run_replay(
    config: Config,
    embedder: Embedder,
    conversations: Sequence[Conversation],
    budget: int,
    *,
    upkeep: bool,
    observe: bool,
    label: str,
) -> dict[str, Any]:
    """One replay, its recall at the end, and (with upkeep) the jobs and the catch-up."""
    sessions = sessions_of(conversations)
    # A minute before the first session: the calendar's first catch-up runs every job
    # once over the empty store, as a new gateway's first start does.
    replayed = await open_replay(
        config, embedder, sessions[0].at - timedelta(minutes=1), upkeep=upkeep, observe=observe
    )
    began = time.perf_counter()
    try:
        with progress(len(sessions), f"{label}: sessions", "session") as bar:
            for session in sessions:
                await advance(replayed, session.at)
                await store_session(replayed, session)
                bar.update()
        asked_at = sessions[-1].turns[-1].at + timedelta(days=1)
        await advance(replayed, asked_at)
        if replayed.loop is not None:
            await replayed.loop.idle(120)
        replay_s = time.perf_counter() - began
        ordered = [(c, replayed.people[c.name]) for c in conversations]
        for _, person_id in ordered:
            await replayed.service.lexical(person_id, wait=True)
        result = await evaluate(
            replayed.store, replayed.service, ordered, budget, baselines=False, asked_at=asked_at
        )
        result["replay_s"] = round(replay_s, 1)
        result["simulated_from"] = sessions[0].at.isoformat()
        result["asked_at"] = asked_at.isoformat()
        result["items"] = await item_counts(replayed.store)
        # The replay's runs only: the start after the downtime is the catch-up's figure.
        result["tally"] = copy.deepcopy(replayed.tally)
        if replayed.calendar is not None:
            result["catch_up"] = await downtime(replayed.calendar, replayed.clock)
    finally:
        await replayed.aclose()
    return result


async def downtime(calendar: UpkeepCalendar, clock: SimulatedClock) -> dict[str, Any]:
    """Five weeks with the gateway down, then a start: what was missed, what ran."""
    clock.advance(DOWNTIME)
    states = await calendar.status()
    runs = await calendar.catch_up()
    ran: dict[str, int] = {s.name: 0 for s in states if s.registered}
    for run in runs:
        ran[run.job] = ran.get(run.job, 0) + 1
    return {
        "downtime_days": DOWNTIME.days,
        "missed_periods": {s.name: s.missed_periods for s in states},
        "runs_at_start": ran,
        "registered": [s.name for s in states if s.registered],
        "unregistered": [s.name for s in states if not s.registered],
        "failed": [r.job for r in runs if r.error],
    }


async def item_counts(store: Store) -> dict[str, int]:
    """Items by "type/status", and active ones by "tier:" (the decay sweep's tiers;
    archived ones are out of the ANN index) at the time of the questions."""
    async with store.reader() as session:
        rows = await session.execute(
            select(MemoryItem.type, MemoryItem.status, func.count()).group_by(
                MemoryItem.type, MemoryItem.status
            )
        )
        counts = {
            f"{getattr(kind, 'value', kind)}/{getattr(status, 'value', status)}": int(n)
            for kind, status, n in rows.all()
        }
        tiers = await session.execute(
            select(MemoryItem.tier, func.count())
            .where(MemoryItem.status == ItemStatus.ACTIVE)
            .group_by(MemoryItem.tier)
        )
        counts |= {f"tier:{getattr(t, 'value', t)}": int(n) for t, n in tiers.all()}
        return counts


def load_all(files: Sequence[Path]) -> list[Conversation]:
    return [load_conversation(path) for path in files]
