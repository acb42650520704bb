"""The composition root: builds every part in order, tears down in reverse."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.new_people import NewPeopleLimit
from channels.webchat import WebchatChannel, WebchatLimits
from gateway import __version__
from gateway.brains import build_brain
from gateway.brains.base import Brain
from gateway.cluster import CLUSTER, TELEGRAM_POLLER, ClusterNode
from gateway.cluster_router import open_cluster_router
from gateway.config import Config, MemoryConfig
from gateway.context import (
    ClockStage,
    OfflineNoticeStage,
    PersonaStage,
    RecentHistoryStage,
    load_persona,
)
from gateway.costs import CostMeter
from gateway.errors import AgentGWError, DatabaseInUse
from gateway.hub import ConversationHub
from gateway.linking import LinkCodes, apply_config_links
from gateway.metrics import METRICS, add_observability_routes
from gateway.pipeline import PipelineSettings, TurnPipeline
from gateway.prompt import AfterTurnStage, ContextStage
from gateway.router import Router
from gateway.runtime import GATEWAY, Gateway
from gateway.sessions import Sessions
from gateway.store import Store
from gateway.store.datalock import DataDirLock, claim_database
from gateway.store.repo import fail_unfinished_turns
from gateway.supervisor import TaskSupervisor
from gateway.utility_costs import MeteredBrain
from gateway.zones import PersonZones
from memory.continuity.stages import build_continuity
from memory.embed import Embedder
from memory.feed import IndexFeed
from memory.jobs.calendar import UpkeepCalendar
from memory.jobs.metrics import run_calendar
from memory.jobs.registry import job_bodies
from memory.porting.mirror import MemoryMirror, mirror_root
from memory.service import MemoryService, load_embedder
from memory.stages import MemoryIngestStage, MemoryPackStage
from memory.tools import MemoryToolbox
from memory.triggers.proactive import ProactiveNotifier
from memory.triggers.stages import TodayStage, TriggerScanStage, TriggerSettings
from memory.utility import BrainUtility
from memory.validity_llm import LLMSlotJudge
from persona.build import build_persona_loop
from persona.lessons.stages import build_lesson_loop
from persona.observation.backlog import observer_behind, observer_extractor
from persona.observation.sink import MemorySink
from voice.files import AudioFiles
from voice.service import VoiceService
from web import guard
from web.panel import add_panel_routes
from web.panel.cost import COSTS
from web.panel.render import TEMPLATES
from web.voice_api import VOICE_ENDPOINT, VoiceEndpoint, add_voice_routes

if TYPE_CHECKING:
    from channels.telegram import TelegramChannel

log = logging.getLogger(__name__)


# How the process stops when another gateway took its database (set by `agentgw run`;
# without it, as in tests, the loss is only logged).
STOP_ON_LOST_DATABASE: web.AppKey[Callable[[DatabaseInUse], None]] = web.AppKey(
    "stop-on-lost-database"
)
# How the process stops when what loads after the socket opened fails (set by
# `agentgw run`; without it the failure is only logged and turns keep waiting).
STOP_ON_FAILED_START: web.AppKey[Callable[[AgentGWError], None]] = web.AppKey(
    "stop-on-failed-start"
)
# Called once the gateway is ready (`agentgw run` prints it).
ANNOUNCE_READY: web.AppKey[Callable[[], None]] = web.AppKey("announce-ready")


def build_stages(
    config: Config,
    memory_pack: MemoryPackStage | None = None,
    zones: PersonZones | None = None,
    offline: OfflineNoticeStage | None = None,
    *,
    persona: str,
) -> list[ContextStage]:
    """The core's context stages; ``persona`` is the persona file's text, read once."""
    clock = ClockStage(zones if zones is not None else PersonZones(None, config.zone))
    # Only the offline brain reads whether its notice was given (one query a turn).
    extra: list[ContextStage] = [offline] if offline is not None else []
    if memory_pack is None:
        return [
            PersonaStage(persona),
            clock,
            RecentHistoryStage(
                config.context.history_tokens,
                int(config.context.history_tokens * config.context.history_step_share),
            ),
            *extra,
        ]
    # The pack recalls older messages; only the last exchanges stay verbatim. The
    # history comes first: the pack leaves out the messages it kept.
    return [
        PersonaStage(persona),
        clock,
        # In steps, so the history's cached prefix holds for several turns.
        RecentHistoryStage(
            memory_pack.history_tokens,
            int(memory_pack.history_tokens * config.context.history_step_share),
        ),
        memory_pack,
        *extra,
    ]


def create_app(
    config: Config,
    *,
    brain: Brain | None = None,
    embedder: Embedder | None = None,
    load: Callable[[MemoryConfig], Embedder] = load_embedder,
) -> web.Application:
    """The aiohttp application; ``brain`` and ``embedder`` replace the configured ones,
    ``load`` the loading of the configured embedder (tests).

    The app serves from the moment the store is open: the channels take, store
    and acknowledge messages while the embedding model (and, with
    ``voice.preload``, the speech models) load in the background; the memory
    layer, the persona loop and the turn pipeline are built after that, and the
    turns that waited then run in order. A pack therefore always has its vectors.
    """
    app = web.Application(client_max_size=max(config.webchat.max_frame_bytes, 1 << 20))
    # Host names, origins, the access token and the security headers.
    guard.install(app, config)

    def lost(error: DatabaseInUse) -> None:
        stop = app.get(STOP_ON_LOST_DATABASE)
        if stop is not None:
            stop(error)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        # Each part pushes its close as it opens: teardown is the start-up read
        # backwards, and a start that fails half-way closes exactly what had opened.
        async with AsyncExitStack() as parts:
            # First in, last out: held from before the store opens until the index
            # files are written at the end.
            parts.enter_context(DataDirLock(config.data_dir))
            # Another data directory may be configured with the same database
            # (store.url): held from before the store opens (a second gateway must not
            # migrate it under the first) until after it closes.
            # In a cluster (store.cluster, PostgreSQL) several gateways share the
            # database on purpose: per-role leases in the store take this lock's place.
            if not config.store.cluster:
                await parts.enter_async_context(
                    claim_database(config.database_url, config.store.lock_check_s, on_lost=lost)
                )
            store = Store(
                config.database_url,
                echo=config.store.echo,
                read_sessions=config.store.read_sessions,
            )
            await store.open()
            parts.push_async_callback(store.close)
            # A cluster (issue 25): this process's membership, heartbeat and singletons.
            cluster: ClusterNode | None = None
            if config.store.cluster:
                cluster = app[CLUSTER] = ClusterNode(
                    store,
                    lease_s=config.store.lease_s,
                    listen=f"{config.server.host}:{config.server.port}",
                    version=__version__,
                )
                await cluster.start()
                parts.push_async_callback(cluster.aclose)
            the_brain = brain if brain is not None else build_brain(config)
            parts.push_async_callback(the_brain.aclose)
            # What the warm-up builds (the memory layer) closes here: after the tasks
            # stopped (the upkeep task among them: the index files are written last),
            # before the brain and the store.
            warmed = await parts.enter_async_context(AsyncExitStack())
            voice: VoiceService | None = None
            if config.voice.enabled:
                voice = VoiceService.from_config(config)
                # After the tasks stopped: voice.preload runs as one.
                parts.push_async_callback(voice.aclose)
            supervisor = TaskSupervisor()
            parts.push_async_callback(supervisor.aclose)
            telegram: TelegramChannel | None = None
            if not config.store.cluster:
                # In a cluster other processes run turns now: a turn left by a dead
                # process is taken over when its claim expires (gateway/cluster_router.py).
                failed = await fail_unfinished_turns(store)
                if failed:
                    log.warning("%d turns were interrupted by the last stop; marked failed", failed)
            await apply_config_links(store, config.links.people)
            links = LinkCodes(store, config.links)
            hub = ConversationHub()
            hub.subscribe_stages(app[METRICS].observe)
            # Budget-aware memory (issue 22): each turn's cost stored, the month's mode
            # read by the pack, the observer and the judge.
            costs = app[COSTS] = await CostMeter.start(store, config, on_cost=app[METRICS].add_cost)
            parts.push_async_callback(costs.aclose)
            hub.subscribe_stages(costs.observe)
            # The utility model's calls (judge, observer, lessons, weekly, slot judge)
            # count in the month's spend too (gateway/utility_costs.py).
            the_brain = MeteredBrain(the_brain, costs)
            # Each person's time zone: their own once a page reported it, else agent.timezone.
            zones = PersonZones(store, config.zone)
            # Read once: the prompt, Telegram's /start and the panel all use this text.
            persona_text = await asyncio.to_thread(
                load_persona, config.agent.persona_file, config.agent.name
            )
            # Messages are taken from now on; their turns wait for the pipeline.
            router: Router
            if cluster is not None:
                # Turns claimed from the store, events fanned out to every process (issue 25).
                router = await open_cluster_router(
                    parts,
                    store,
                    hub,
                    supervisor,
                    lease_s=config.store.lease_s,
                    max_running=config.server.max_running_turns,
                    max_queued=config.server.max_queued_turns,
                    owner=cluster.member_id,
                    listener=cluster.listener,
                    on_member_gone=cluster.on_member_gone,
                )
            else:
                router = Router(
                    store,
                    None,
                    hub,
                    supervisor,
                    max_running=config.server.max_running_turns,
                    max_queued=config.server.max_queued_turns,
                )
            webchat = WebchatChannel(
                router,
                hub,
                WebchatLimits(
                    max_frame_bytes=config.webchat.max_frame_bytes,
                    max_message_chars=config.webchat.max_message_chars,
                    rate_per_minute=config.webchat.rate_per_minute,
                    history_on_connect=config.webchat.history_on_connect,
                    max_bad_frames_per_minute=config.webchat.max_bad_frames_per_minute,
                ),
                agent_name=config.agent.name,
                brain_name=the_brain.name,
                link_codes=links,
                zones=zones,
                new_people=NewPeopleLimit(
                    config.webchat.new_people_per_hour, config.webchat.new_people_burst
                )
                if config.webchat.new_people_per_hour > 0
                else None,
            )
            app[VOICE_ENDPOINT] = VoiceEndpoint(
                router, hub, voice, AudioFiles.from_config(config), config.voice
            )
            if config.telegram.enabled:
                # Imported only when used: python-telegram-bot takes ~1 s to import.
                from channels.telegram import TelegramChannel, TelegramSettings
                from channels.telegram_text import persona_summary

                telegram = TelegramChannel(
                    TelegramSettings.from_config(config),
                    router,
                    hub,
                    links,
                    agent_name=config.agent.name,
                    persona_summary=persona_summary(persona_text),
                    voice=voice,
                    zones=zones,
                )
                # After the drain, so the replies of the last turns still go out.
                parts.push_async_callback(telegram.aclose, config.server.shutdown_grace_s)
                if cluster is not None and config.telegram.mode == "polling":
                    # One poller for the cluster: whoever holds its lease (a webhook
                    # lands on any process and needs none).
                    telegram.polls = telegram.polls_always = False
                # Returns at once: connecting (and retrying) runs in the background.
                await telegram.start()
                if cluster is not None and config.telegram.mode == "polling":
                    cluster.singleton(
                        TELEGRAM_POLLER, telegram.start_polling, telegram.stop_polling
                    )
            gateway = app[GATEWAY] = Gateway(
                config,
                store,
                the_brain,
                hub,
                supervisor,
                router,
                webchat,
                voice=voice,
                links=links,
                telegram=telegram,
                zones=zones,
                persona_text=persona_text,
                cluster=cluster,
            )
            warm_up = _warm_up(app, gateway, warmed, embedder, load)
            if _loads_models(config, embedder):
                supervisor.spawn("warm-up", warm_up)
            else:
                # Nothing slow to wait for: ready before the first request.
                await warm_up
            yield
            # on_shutdown already stopped input and closed the sockets. Then the
            # closes run, in reverse: Telegram, the tasks, voice, memory, brain, store.
            await router.drain(config.server.shutdown_grace_s)
            if gateway.sessions is not None:
                # Every open session's pending memory work, before the tasks stop.
                await gateway.sessions.aclose(config.server.shutdown_grace_s)
            await supervisor.aclose()

    async def on_shutdown(app: web.Application) -> None:
        gateway = app.get(GATEWAY)
        if gateway is not None:
            gateway.router.stop_accepting()
            await gateway.webchat.close_all()
            if gateway.telegram is not None:
                await gateway.telegram.stop_input()
        cluster = app.get(CLUSTER)
        if cluster is not None:
            # The singletons' leases go back now, not after the drain: another process
            # takes over the poller while this one finishes its turns.
            await cluster.stop_singletons()

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(on_shutdown)
    app.router.add_get("/", chat_page)
    app.router.add_get("/ws", websocket)
    app.router.add_get("/healthz", healthz)
    add_observability_routes(app)
    if config.telegram.enabled and config.telegram.mode == "webhook":
        app.router.add_post(config.telegram.webhook_path, telegram_webhook)
    add_voice_routes(app)
    add_panel_routes(app, config.zone)
    app.router.add_static("/static", str(resources.files("web").joinpath("static")))
    return app


def _loads_models(config: Config, embedder: Embedder | None) -> bool:
    """Whether the start has models to load (then the app serves while they do)."""
    loads_embedder = (
        config.memory.enabled and embedder is None and config.memory.embedder == "minilm"
    )
    return loads_embedder or (config.voice.enabled and config.voice.preload)


async def _warm_up(
    app: web.Application,
    gateway: Gateway,
    warmed: AsyncExitStack,
    embedder: Embedder | None,
    load: Callable[[MemoryConfig], Embedder],
) -> None:
    """Load the models, build what needs them, start the turns that waited; then ready."""
    config, store, supervisor = gateway.config, gateway.store, gateway.supervisor
    try:
        preload: asyncio.Task[None] | None = None
        if gateway.voice is not None and config.voice.preload:
            # Beside the embedding model: turns need only the latter.
            preload = supervisor.spawn("voice-preload", gateway.voice.preload())
        memory_pack: MemoryPackStage | None = None
        memory_after: list[MemoryIngestStage] = []
        if config.memory.enabled:
            # The embedding model loads once, in a worker thread.
            service = gateway.memory = await MemoryService.start(
                store, config, embedder=embedder, zones=gateway.zones, loader=load
            )
            # Closed after the tasks stopped: the index files are written last.
            warmed.push_async_callback(service.aclose)
            if config.memory.slot_judge == "llm" and gateway.brain.name != "offline":
                # The utility model decides what a statement ends (memory/validity_llm.py).
                service.slot_judge = LLMSlotJudge(gateway.brain)
            if gateway.brain.name != "offline":
                # The weekly job's categories, summaries and insights come from the
                # utility model when there is one (memory/utility.py); extractive without.
                service.utility = BrainUtility(gateway.brain, gateway.brain.name)
            if gateway.cluster is not None:
                # Each gateway keeps its own indexes; the other gateways' changes
                # reach them through the store's notifications (memory/feed.py).
                feed = IndexFeed(service, gateway.cluster.listener)
                await feed.start()
                warmed.push_async_callback(feed.aclose)
            memory_pack = MemoryPackStage(
                service,
                config.memory.history_tokens,
                agent_name=config.agent.name,
                about_person_items=config.memory.about_person_items,
                budget=app[COSTS].state,
            )
            memory_after = [MemoryIngestStage(service, memory_pack)]
            # memory.mirror_dir (issue 23): the readable files kept in step, edits read back.
            mirror = mirror_root(config)
            if mirror is not None:
                supervisor.spawn("memory-mirror", MemoryMirror(service, config, mirror).run())
            # The upkeep calendar: a catch-up now, in the background, then on its heartbeat.
            metrics = app[METRICS].upkeep
            gateway.upkeep = UpkeepCalendar(
                store,
                service,
                config.upkeep,
                config.zone,
                job_bodies(config),
                on_run=metrics.observe,
                stop_grace_s=config.server.shutdown_grace_s,
                seed_new_jobs=True,
            )
        memory = gateway.memory
        # Persona state, observations and anchors go after the core's stages (the
        # anchor stage works on the history they built); judge and observe after turns.
        gateway.persona = persona_loop = await asyncio.to_thread(
            build_persona_loop,
            config,
            store,
            gateway.brain,
            supervisor,
            persona_text=gateway.persona_text,
            sink=MemorySink(memory) if memory is not None else None,
            zones=gateway.zones,
            # The local judge compares replies with the exemplars in the same vectors.
            embedder=memory.embedder if memory is not None else None,
            embed_queue=memory.embed_queue if memory is not None else None,
            budget=app[COSTS].state,
        )
        if gateway.cluster is not None:
            # One observer, reflector and persona version at a time across the cluster.
            persona_loop.observe_pass.leases = gateway.cluster.leases
        # Lessons from corrections (issue 22): in every prompt's cached prefix, learned after.
        lessons = (
            build_lesson_loop(
                config.lessons,
                store,
                gateway.brain,
                supervisor,
                embedder=memory.embedder if memory is not None else None,
            )
            if config.lessons.enabled
            else None
        )
        # Working memory and decisions (issue 24): after the lessons in the cached prefix.
        continuity = (
            build_continuity(
                config.continuity,
                store,
                memory.embedder if memory is not None else None,
                # Handoff notes by the utility model when one is configured (memory/utility.py).
                memory.utility if memory is not None else None,
            )
            if config.continuity.enabled
            else None
        )
        # Forward triggers (issue 22): the Today block, the scan after the turn, and
        # the day's proactive message on the channels that ask for it.
        trigger_stages, trigger_after = _trigger_stages(gateway)
        # Memory tools for the model (issue 24): the pipeline offers them to a model brain.
        toolbox = (
            MemoryToolbox(
                memory,
                memory_pack,
                config.tools,
                continuity.book if continuity is not None else None,
            )
            if config.tools.enabled and memory is not None and memory_pack is not None
            else None
        )
        gateway.pipeline = pipeline = TurnPipeline(
            store,
            gateway.brain,
            [
                *build_stages(
                    config,
                    memory_pack,
                    gateway.zones,
                    OfflineNoticeStage(store) if gateway.brain.name == "offline" else None,
                    persona=gateway.persona_text,
                ),
                *([lessons.context_stage] if lessons is not None else []),
                *(continuity.context_stages if continuity is not None else []),
                *trigger_stages,
                *(persona_loop.context_stages if config.persona.enabled else []),
            ],
            gateway.hub,
            PipelineSettings(
                max_tokens=config.brain.reply_max_tokens,
                temperature=config.brain.temperature,
                timeout_s=config.brain.timeout_s,
                history_max_messages=config.context.history_max_messages,
                prompt_caching=config.claude.prompt_caching,
                max_retries=config.brain.max_retries,
                turn_deadline_s=config.brain.turn_deadline_s,
                first_token_timeout_s=config.brain.first_token_timeout_s,
                waiting_notice_s=config.brain.waiting_notice_s,
                max_tool_calls=config.tools.max_calls_per_turn,
            ),
            # Memory first: the episodes are stored before judge and observe run.
            after_stages=[
                *memory_after,
                *trigger_after,
                *(persona_loop.after_stages if config.persona.enabled else []),
                *([lessons.after_stage] if lessons is not None else []),
                *([continuity.after_stage] if continuity is not None else []),
            ],
            toolbox=toolbox,
        )
        # Sessions (issue 21): a session's end writes its person's pending memory
        # work; its first pack waits (bounded) for their unread turns to be read.
        sessions = gateway.sessions = Sessions(
            [observer_extractor(persona_loop)] if config.persona.enabled else [],
            memory.save_indexes if memory is not None else None,
            idle_s=config.upkeep_jobs.session_idle_s,
            catch_up_s=config.upkeep_jobs.session_catch_up_s,
            close_s=config.upkeep_jobs.session_close_s,
            behind=observer_behind(persona_loop),
            # A session's end writes its handoff note (issue 24).
            on_end=[continuity.session_ended] if continuity is not None else [],
        )
        if memory_pack is not None:
            memory_pack.before_pack = sessions.before_pack
        gateway.webchat.on_page_closed = sessions.page_closed
        if config.memory.enabled or config.persona.enabled:
            # Last after the turn: the quiet spell that ends a session starts once it is done.
            pipeline.after_stages = (*pipeline.after_stages, sessions.after_stage)
        if gateway.upkeep is not None:
            # Started once the observer exists: the nightly's extraction catch-up runs it.
            if config.persona.enabled:
                gateway.upkeep.extractors = [observer_extractor(persona_loop)]
            supervisor.spawn("upkeep-calendar", run_calendar(gateway.upkeep, app[METRICS].upkeep))
        gateway.router.attach(pipeline)
        if preload is not None:
            await asyncio.shield(preload)
    except Exception as exc:
        stop = app.get(STOP_ON_FAILED_START)
        if stop is None:
            raise
        # In the background nothing else would end the process: it would take
        # messages forever and never answer them.
        if isinstance(exc, AgentGWError):
            log.error("agentgw could not start: %s", exc)  # noqa: TRY400 (ours: no stack trace)
            stop(exc)
        else:
            log.exception("agentgw could not start")
            stop(AgentGWError(f"could not start: {exc!r}"))
        return
    gateway.ready.set()
    announce = app.get(ANNOUNCE_READY)
    # `agentgw run` says "ready" itself, as the console's last line.
    log.log(
        logging.INFO if announce is None else logging.DEBUG,
        "agentgw %s ready: brain=%s store=%s",
        __version__,
        gateway.brain.name,
        store.url,
    )
    if announce is not None:
        announce()


def _trigger_stages(gateway: Gateway) -> tuple[list[ContextStage], list[AfterTurnStage]]:
    """Forward triggers' stages, and their proactive task when a channel asks for one."""
    config = gateway.config.triggers
    if not config.enabled or gateway.zones is None:
        return [], []
    settings = TriggerSettings(
        horizon_days=config.horizon_days,
        max_per_message=config.max_per_message,
        context_chars=config.context_chars,
        memories_per_trigger=config.memories_per_trigger,
    )
    if config.proactive_channels:
        notifier = ProactiveNotifier(
            gateway.store,
            gateway.hub,
            gateway.zones,
            config,
            reach={"telegram": gateway.telegram.reach} if gateway.telegram is not None else {},
            # A model words the day's line; the offline brain leaves it to the template.
            brain=gateway.brain if gateway.brain.name in ("claude", "openai") else None,
        )
        gateway.supervisor.spawn("trigger-messages", notifier.run_forever())
    return (
        [TodayStage(gateway.store, gateway.zones, settings)],
        [TriggerScanStage(gateway.store, gateway.zones, settings)],
    )


async def chat_page(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    # The panel's environment: autoescaped, so the agent's name is text, never markup.
    page = (
        request.app[TEMPLATES]
        .get_template("chat.html")
        .render(
            agent_name=gateway.config.agent.name,
            voice_enabled="on" if gateway.config.voice.enabled else "off",
            voice_max_seconds=f"{gateway.config.voice.max_seconds:g}",
        )
    )
    response = web.Response(text=page, content_type="text/html")
    token = request.query.get("token")
    if token:
        # Keep the token in a cookie so the page's own requests carry it.
        response.set_cookie(guard.TOKEN_COOKIE, token, httponly=True, samesite="Strict")
    return response


async def websocket(request: web.Request) -> web.StreamResponse:
    return await request.app[GATEWAY].webchat.handle(request)


async def telegram_webhook(request: web.Request) -> web.StreamResponse:
    telegram = request.app[GATEWAY].telegram
    if telegram is None:
        raise web.HTTPNotFound()
    return await telegram.handle_webhook(request)


async def healthz(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    pipeline = gateway.pipeline
    body: dict[str, Any] = {
        # "starting" while the models load: messages are taken and stored, turns wait.
        "status": "ok" if gateway.ready.is_set() else "starting",
        "version": __version__,
        "brain": gateway.brain.name,
        "turns_in_flight": gateway.router.turns_in_flight,
        "stages": {
            "context": [stage.name for stage in pipeline.stages] if pipeline else [],
            "after_turn": [stage.name for stage in pipeline.after_stages] if pipeline else [],
        },
    }
    if gateway.memory is not None:
        # After a model change, until this is 0 some people's recall is full text only.
        body["memory"] = {
            "dense": gateway.memory.dense,
            "people_being_embedded": gateway.memory.reembedding,
            "items_embedded_since_start": gateway.memory.reembedded_items,
        }
    return web.json_response(body)
