"""``/metrics``: the gateway's numbers in the Prometheus text format.

Built on ``prometheus_client`` with a registry per app (tests run many apps in
one process; the library's global registry would mix them). Turn latencies and
counts come from the pipeline's stage events (gateway/events.py); numbers that
describe the present (open sockets, re-embedding backlog, memory items by tier)
are read from the live objects when Prometheus scrapes.

Labels name stages, channels, outcomes and models, never a person, a
conversation or a message: their number is bounded by the configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from sqlalchemy import Connection, func, select

from gateway.brains import resolve_kind
from gateway.errors import AgentGWError
from gateway.events import ObserverBacklog, StageEvent, StageKind, StagePhase
from gateway.runtime import GATEWAY, Gateway
from gateway.store.db import alembic_config
from memory.jobs.metrics import UpkeepMetrics, overdue

log = logging.getLogger(__name__)

# From a fast context stage (~1 ms) to a slow model's whole answer (~2 min).
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# A Memory Pack's estimated tokens (memory.pack_tokens is 800 by default) and items kept.
PACK_TOKEN_BUCKETS = (0, 50, 100, 200, 300, 400, 600, 800, 1200, 1600, 2400, 3200, 6400)
PACK_ITEM_BUCKETS = (0, 1, 2, 3, 5, 8, 12, 16, 24, 32, 48, 64)


class GatewayMetrics:
    """The app's registry and the instruments the stage events feed."""

    def __init__(self, live: Callable[[], Gateway | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.stage_seconds = Histogram(
            "agentgw_turn_stage_seconds",
            "How long each stage of a turn took (brain_first_token: to the first token).",
            ["phase", "stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "agentgw_turn_seconds",
            "A whole turn, from its message being stored to its reply sent (or its failure).",
            ["channel"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.turns = Counter(
            "agentgw_turns",
            "Turns by outcome (ok or the error code) and channel.",
            ["outcome", "channel"],
            registry=self.registry,
        )
        self.stage_errors = Counter(
            "agentgw_stage_errors",
            "Stages that failed, by phase, stage and code.",
            ["phase", "stage", "code"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "agentgw_tokens",
            "Model tokens by model and direction (input, output, cache_read, cache_write).",
            ["model", "direction"],
            registry=self.registry,
        )
        self.pack_tokens = Histogram(
            "agentgw_pack_tokens",
            "Estimated tokens of each prompt's Memory Pack.",
            buckets=PACK_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.pack_items = Histogram(
            "agentgw_pack_items",
            "Memory items each Memory Pack kept.",
            buckets=PACK_ITEM_BUCKETS,
            registry=self.registry,
        )
        self.cost = Counter(
            "agentgw_cost_usd",
            "What the turns' model tokens cost in USD, priced by budget.prices, by model.",
            ["model"],
            registry=self.registry,
        )
        self.live = LiveCollector(live)
        self.registry.register(self.live)
        self.upkeep = UpkeepMetrics(self.registry)
        # Each (phase, stage)'s histogram child, looked up once: ``labels`` validates
        # and locks on every call, some twenty times a turn (issue 28, "CPU per turn").
        self._stage_children: dict[tuple[str, str], Histogram] = {}

    def add_cost(self, model: str, usd: float) -> None:
        """One turn's cost (from the cost meter, gateway/costs.py)."""
        self.cost.labels(model).inc(usd)

    def observe(self, event: StageEvent) -> None:
        """A stage event from the hub (synchronous: it costs the turn no await)."""
        if event.kind is StageKind.START:
            return
        if event.phase is StagePhase.TURN:
            self.turns.labels(event.code or "unknown", event.channel).inc()
            if event.duration_s is not None:
                self.turn_seconds.labels(event.channel).observe(event.duration_s)
            if event.model is not None:
                for direction, count in (
                    ("input", event.input_tokens),
                    ("output", event.output_tokens),
                    ("cache_read", event.cache_read_tokens),
                    ("cache_write", event.cache_write_tokens),
                ):
                    self.tokens.labels(event.model, direction).inc(count)
            return
        if event.pack_tokens is not None:
            self.pack_tokens.observe(event.pack_tokens)
        if event.pack_items is not None:
            self.pack_items.observe(event.pack_items)
        if event.duration_s is not None:
            key = (event.phase.value, event.stage)
            child = self._stage_children.get(key)
            if child is None:
                child = self._stage_children[key] = self.stage_seconds.labels(*key)
            child.observe(event.duration_s)
        if event.kind is StageKind.ERROR:
            self.stage_errors.labels(event.phase.value, event.stage, event.code or "unknown").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class LiveCollector(Collector):
    """Gauges read from the running gateway at scrape time."""

    def __init__(self, live: Callable[[], Gateway | None]) -> None:
        self._live = live
        self.items_by_tier: dict[tuple[str, str], int] = {}
        # Refreshed by the handler before each scrape, like the tiers (None: not observing).
        self.observer_backlog: ObserverBacklog | None = None

    def describe(self) -> Iterable[Metric]:
        # Described as empty families: the registry learns the names without a scrape.
        return list(self._families(None))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self._live()))

    # Items by tier need a query: the handler refreshes them before each scrape.
    def _families(self, gateway: Gateway | None) -> Iterable[Metric]:
        up = GaugeMetricFamily("agentgw_ready", "1 once the models loaded and turns run.")
        sockets = GaugeMetricFamily("agentgw_webchat_open_sockets", "Open webchat sockets.")
        running = GaugeMetricFamily("agentgw_turns_in_flight", "Turns running or queued.")
        backlog = GaugeMetricFamily(
            "agentgw_memory_reembedding_people",
            "People whose memory items still wait for vectors of the current model.",
        )
        reembedded = GaugeMetricFamily(
            "agentgw_memory_reembedded_items",
            "Memory items given vectors since the start (re-embedding passes).",
        )
        tiers = GaugeMetricFamily(
            "agentgw_memory_items",
            "Memory items by tier and status (as of the last scrape).",
            labels=["tier", "status"],
        )
        stt = CounterMetricFamily(
            "agentgw_voice_stt_seconds", "Seconds the speech-to-text model worked."
        )
        tts = CounterMetricFamily(
            "agentgw_voice_tts_seconds", "Seconds the text-to-speech model worked."
        )
        telegram = CounterMetricFamily(
            "agentgw_telegram_updates", "Updates received from Telegram."
        )
        observer = (
            GaugeMetricFamily(
                "agentgw_observer_backlog_messages",
                "Messages the observer has not read yet (all conversations).",
            ),
            GaugeMetricFamily(
                "agentgw_observer_backlog_tokens",
                "Tokens of the messages the observer has not read yet (all conversations).",
            ),
            GaugeMetricFamily(
                "agentgw_observer_backlog_conversations",
                "Conversations with unread messages past observe.backlog_degraded_tokens.",
            ),
        )
        if self.observer_backlog is not None:
            numbers = self.observer_backlog
            for family, number in zip(
                observer,
                (numbers.messages, numbers.tokens, numbers.conversations_over),
                strict=True,
            ):
                family.add_metric([], float(number))
        if gateway is not None:
            if gateway.voice is not None:
                stt.add_metric([], gateway.voice.stt_seconds)
                tts.add_metric([], gateway.voice.tts_seconds)
            if gateway.telegram is not None:
                telegram.add_metric([], float(gateway.telegram.updates_received))
            up.add_metric([], 1.0 if gateway.ready.is_set() else 0.0)
            sockets.add_metric([], float(gateway.webchat.open_sockets))
            running.add_metric([], float(gateway.router.turns_in_flight))
            if gateway.memory is not None:
                backlog.add_metric([], float(gateway.memory.reembedding))
                reembedded.add_metric([], float(gateway.memory.reembedded_items))
            for (tier, status), count in sorted(self.items_by_tier.items()):
                tiers.add_metric([tier, status], float(count))
        return (up, sockets, running, backlog, reembedded, tiers, stt, tts, telegram, *observer)


def count_items_by_tier(connection: Connection) -> dict[tuple[str, str], int]:
    from memory.models import MemoryItem

    rows = connection.execute(
        select(MemoryItem.tier, MemoryItem.status, func.count()).group_by(
            MemoryItem.tier, MemoryItem.status
        )
    )
    return {(str(tier), str(status)): int(count) for tier, status, count in rows}


async def observer_backlog(gateway: Gateway) -> ObserverBacklog | None:
    """The observer's unread messages, or None when no observer runs."""
    loop = gateway.persona
    if loop is None or not loop.observe_enabled:
        return None
    return await loop.observer_backlog(gateway.config.observe.backlog_degraded_tokens)


METRICS = web.AppKey("metrics", GatewayMetrics)


def add_observability_routes(app: web.Application) -> GatewayMetrics:
    """``/metrics`` and ``/readyz``; the caller subscribes ``observe`` to the hub."""
    metrics = app[METRICS] = GatewayMetrics(lambda: app.get(GATEWAY))

    async def serve_metrics(request: web.Request) -> web.Response:
        gateway = request.app.get(GATEWAY)
        if gateway is not None and gateway.memory is not None:
            try:
                metrics.live.items_by_tier = await gateway.store.read(count_items_by_tier)
            except AgentGWError as exc:
                # The other numbers still go out; the tiers keep their last values.
                log.warning("metrics: memory items not counted: %s", exc)
        if gateway is not None:
            try:
                metrics.live.observer_backlog = await observer_backlog(gateway)
            except AgentGWError as exc:
                log.warning("metrics: observer backlog not counted: %s", exc)
        return web.Response(
            body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def readyz(request: web.Request) -> web.Response:
        gateway = request.app.get(GATEWAY)
        if gateway is None:
            return web.json_response({"status": "starting"}, status=503)
        body = await readiness(gateway)
        return web.json_response(body, status=200 if body["status"] in ("ok", "degraded") else 503)

    app.router.add_get("/metrics", serve_metrics)
    app.router.add_get("/readyz", readyz)
    return metrics


def _migrations(connection: Connection) -> tuple[str | None, str | None]:
    current = MigrationContext.configure(connection).get_current_revision()
    head = ScriptDirectory.from_config(alembic_config(connection)).get_current_head()
    return current, head


async def readiness(gateway: Gateway) -> dict[str, Any]:
    """Whether the gateway can answer now: "ok", "degraded" (answers, with a
    backlog), "starting" or "unavailable" (with the failing check)."""
    checks: dict[str, Any] = {}
    problems: list[str] = []
    try:
        current, head = await gateway.store.read(_migrations)
    except AgentGWError as exc:
        checks["store"] = {"ok": False, "error": str(exc)}
        problems.append("store")
    else:
        checks["store"] = {"ok": True}
        checks["migrations"] = {"ok": current == head, "current": current, "head": head}
        if current != head:
            problems.append("migrations")
    # The offline brain is fine when chosen (brain.kind = "offline"); standing in
    # for a model whose key or address is missing, it makes the gateway degraded.
    configured = gateway.config.brain.kind
    offline_by_choice = configured == "offline"
    brain_ok = gateway.brain.name != "offline" or offline_by_choice
    checks["brain"] = {
        "ok": brain_ok,
        "name": gateway.brain.name,
        "configured": configured,
        "resolved": resolve_kind(gateway.config),
    }
    memory = gateway.memory
    if gateway.config.memory.enabled:
        checks["indexes"] = {"ok": memory is not None}
    degraded: dict[str, Any] = {}
    if not brain_ok:
        # Degraded, not unavailable: the offline brain still answers every message
        # (a first start with no key is one), so an orchestrator keeps it in rotation.
        degraded["brain"] = "offline: no model is configured"
    if memory is not None:
        checks["memory"] = {
            "dense": memory.dense,
            "people_being_embedded": memory.reembedding,
            "items_embedded_since_start": memory.reembedded_items,
        }
        if memory.reembedding:
            degraded["people_being_embedded"] = memory.reembedding
    if gateway.upkeep is not None:
        # Degraded, not unavailable: memory that is behind still answers.
        try:
            late = overdue(await gateway.upkeep.status())
        except AgentGWError as exc:
            checks["upkeep"] = {"ok": False, "error": str(exc)}
        else:
            checks["upkeep"] = {"ok": not late}
            if late:
                degraded["upkeep_overdue"] = late
    if gateway.cluster is not None:
        # In a cluster (issue 25): unavailable once the others would count this process
        # dead (its heartbeat late past store.lease_s): its leases are theirs to take.
        try:
            checks["cluster"] = await gateway.cluster.status()
        except AgentGWError as exc:
            checks["cluster"] = {"ok": False, "error": str(exc)}
        if not checks["cluster"]["ok"]:
            problems.append("cluster")
    backlog = await observer_backlog(gateway)
    if backlog is not None:
        checks["observer"] = backlog.as_dict()
        if backlog.conversations_over:
            # Unread messages past the threshold: the observer is failing or far behind
            # (its pass should have run at observe.observer_tokens).
            degraded["observer_backlog"] = backlog.as_dict()
    if not gateway.ready.is_set():
        status = "starting"
    elif problems:
        status = "unavailable"
    elif degraded:
        status = "degraded"
    else:
        status = "ok"
    body: dict[str, Any] = {"status": status, "checks": checks}
    if problems:
        body["failing"] = problems
    if degraded:
        body["degraded"] = degraded
    return body
