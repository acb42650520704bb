"""The composition root: builds every part in order, tears down in reverse."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from channels.telegram import TelegramChannel, TelegramSettings
from channels.telegram_text import persona_summary
from channels.webchat import WebchatChannel, WebchatLimits
from gateway import __version__
from gateway.brains import build_brain
from gateway.brains.base import Brain
from gateway.config import Config
from gateway.context import (
    ClockStage,
    OfflineNoticeStage,
    PersonaStage,
    RecentHistoryStage,
    load_persona,
)
from gateway.errors import DatabaseInUse
from gateway.hub import ConversationHub
from gateway.linking import LinkCodes, apply_config_links
from gateway.pipeline import PipelineSettings, TurnPipeline
from gateway.prompt import ContextStage
from gateway.router import Router
from gateway.store import Store
from gateway.store.datalock import DataDirLock, claim_database
from gateway.store.repo import fail_unfinished_turns
from gateway.supervisor import TaskSupervisor
from gateway.zones import PersonZones
from memory.embed import Embedder
from memory.service import MemoryService
from memory.stages import MemoryIngestStage, MemoryPackStage
from persona.observation.sink import MemorySink
from persona.stages import PersonaLoop, build_persona_loop
from voice.files import AudioFiles
from voice.service import VoiceService
from web import guard
from web.voice_api import VOICE_ENDPOINT, VoiceEndpoint, add_voice_routes

log = logging.getLogger(__name__)


@dataclass
class Gateway:
    """The running parts, reachable from handlers through ``GATEWAY``."""

    config: Config
    store: Store
    brain: Brain
    hub: ConversationHub
    supervisor: TaskSupervisor
    pipeline: TurnPipeline
    router: Router
    webchat: WebchatChannel
    # None when voice.enabled is false; models load on first use or with voice.preload.
    voice: VoiceService | None = None
    links: LinkCodes | None = None
    # None unless telegram.enabled.
    telegram: TelegramChannel | None = None
    # PersonaState versions, observations, SyncScores and anchors (issue 4).
    persona: PersonaLoop | None = None
    # Memory items, the Memory Pack and its traces (issue 3); None when memory.enabled is false.
    memory: MemoryService | None = None
    # Each person's time zone (gateway/zones.py).
    zones: PersonZones | None = None


GATEWAY = web.AppKey("gateway", Gateway)
# How the process stops when another gateway took its database (set by `agentgw run`;
# without it, as in tests, the loss is only logged).
STOP_ON_LOST_DATABASE: web.AppKey[Callable[[DatabaseInUse], None]] = web.AppKey(
    "stop-on-lost-database"
)


def build_stages(
    config: Config,
    memory_pack: MemoryPackStage | None = None,
    zones: PersonZones | None = None,
    offline: OfflineNoticeStage | None = None,
) -> list[ContextStage]:
    persona = load_persona(config.agent.persona_file, config.agent.name)
    clock = ClockStage(zones if zones is not None else PersonZones(None, config.zone))
    # Only the offline brain reads whether its notice was given (one query a turn).
    extra: list[ContextStage] = [offline] if offline is not None else []
    if memory_pack is None:
        return [
            PersonaStage(persona),
            clock,
            RecentHistoryStage(config.context.history_tokens),
            *extra,
        ]
    # The pack recalls older messages; only the last exchanges stay verbatim.
    return [
        PersonaStage(persona),
        clock,
        memory_pack,
        RecentHistoryStage(memory_pack.history_tokens),
        *extra,
    ]


def create_app(
    config: Config, *, brain: Brain | None = None, embedder: Embedder | None = None
) -> web.Application:
    """The aiohttp application; ``brain`` and ``embedder`` replace the configured ones (tests)."""
    app = web.Application(client_max_size=max(config.webchat.max_frame_bytes, 1 << 20))
    # Host names, origins, the access token and the security headers.
    guard.install(app, config)

    async def hold_data_dir(app: web.Application) -> AsyncIterator[None]:
        # First in, last out: held from before the store opens until the index files
        # are written at the end.
        with DataDirLock(config.data_dir):
            yield

    async def hold_database(app: web.Application) -> AsyncIterator[None]:
        # Another data directory may be configured with the same database (store.url):
        # held from before the store opens (a second gateway must not migrate it
        # under the first) until after it closes.
        def lost(error: DatabaseInUse) -> None:
            stop = app.get(STOP_ON_LOST_DATABASE)
            if stop is not None:
                stop(error)

        async with claim_database(config.database_url, config.store.lock_check_s, on_lost=lost):
            yield

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        store = Store(config.database_url, echo=config.store.echo)
        await store.open()
        supervisor = TaskSupervisor()
        the_brain = brain if brain is not None else build_brain(config)
        voice: VoiceService | None = None
        telegram: TelegramChannel | None = None
        memory: MemoryService | None = None
        try:
            failed = await fail_unfinished_turns(store)
            if failed:
                log.warning("%d turns were interrupted by the last stop; marked failed", failed)
            await apply_config_links(store, config.links.people)
            links = LinkCodes(store, config.links)
            hub = ConversationHub()
            # Each person's time zone: their own once a page reported it, else agent.timezone.
            zones = PersonZones(store, config.zone)
            persona_text = await asyncio.to_thread(
                load_persona, config.agent.persona_file, config.agent.name
            )
            memory_pack: MemoryPackStage | None = None
            memory_after: list[MemoryIngestStage] = []
            if config.memory.enabled:
                # The embedding model loads once, in a worker thread.
                memory = await MemoryService.start(store, config, embedder=embedder, zones=zones)
                memory_pack = MemoryPackStage(
                    memory,
                    config.memory.history_tokens,
                    agent_name=config.agent.name,
                    about_person_items=config.memory.about_person_items,
                )
                memory_after = [MemoryIngestStage(memory, memory_pack)]
                supervisor.spawn("memory-upkeep", memory.upkeep_forever())
            # Persona state, observations and anchors go after the core's stages (the
            # anchor stage works on the history they built); judge and observe after turns.
            persona_loop = await asyncio.to_thread(
                build_persona_loop,
                config,
                store,
                the_brain,
                supervisor,
                persona_text=persona_text,
                sink=MemorySink(memory) if memory is not None else None,
                zones=zones,
                # The local judge compares replies with the exemplars in the same vectors.
                embedder=memory.embedder if memory is not None else None,
            )
            pipeline = TurnPipeline(
                store,
                the_brain,
                [
                    *build_stages(
                        config,
                        memory_pack,
                        zones,
                        OfflineNoticeStage(store) if the_brain.name == "offline" else None,
                    ),
                    *(persona_loop.context_stages if config.persona.enabled else []),
                ],
                hub,
                PipelineSettings(
                    max_tokens=config.brain.reply_max_tokens,
                    temperature=config.brain.temperature,
                    timeout_s=config.brain.timeout_s,
                    history_max_messages=config.context.history_max_messages,
                    prompt_caching=config.claude.prompt_caching,
                    max_retries=config.brain.max_retries,
                    turn_deadline_s=config.brain.turn_deadline_s,
                ),
                # Memory first: the episodes are stored before judge and observe run.
                after_stages=[
                    *memory_after,
                    *(persona_loop.after_stages if config.persona.enabled else []),
                ],
            )
            router = Router(store, pipeline, hub, supervisor)
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
            )
            if config.voice.enabled:
                voice = VoiceService.from_config(config)
                if config.voice.preload:
                    supervisor.spawn("voice-preload", voice.preload())
            app[VOICE_ENDPOINT] = VoiceEndpoint(
                router, hub, voice, AudioFiles.from_config(config), config.voice
            )
            if config.telegram.enabled:
                persona = await asyncio.to_thread(
                    load_persona, config.agent.persona_file, config.agent.name
                )
                telegram = TelegramChannel(
                    TelegramSettings.from_config(config),
                    router,
                    hub,
                    links,
                    agent_name=config.agent.name,
                    persona_summary=persona_summary(persona),
                    voice=voice,
                    zones=zones,
                )
                # Returns at once: connecting (and retrying) runs in the background.
                await telegram.start()
            app[GATEWAY] = Gateway(
                config,
                store,
                the_brain,
                hub,
                supervisor,
                pipeline,
                router,
                webchat,
                voice=voice,
                links=links,
                telegram=telegram,
                persona=persona_loop,
                memory=memory,
                zones=zones,
            )
            log.info("agentgw %s ready: brain=%s store=%s", __version__, the_brain.name, store.url)
            yield
            # on_shutdown already stopped input and closed the sockets.
            await router.drain(config.server.shutdown_grace_s)
            await supervisor.aclose()
        finally:
            if telegram is not None:
                # After the drain, so the replies of the last turns still go out.
                await telegram.aclose(config.server.shutdown_grace_s)
            await supervisor.aclose()
            if voice is not None:
                await voice.aclose()
            if memory is not None:
                # After the upkeep task stopped: index files are written last.
                await memory.aclose()
            await the_brain.aclose()
            await store.close()

    async def on_shutdown(app: web.Application) -> None:
        gateway = app.get(GATEWAY)
        if gateway is not None:
            gateway.router.stop_accepting()
            await gateway.webchat.close_all()
            if gateway.telegram is not None:
                await gateway.telegram.stop_input()

    app.cleanup_ctx.append(hold_data_dir)
    app.cleanup_ctx.append(hold_database)
    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(on_shutdown)
    app.router.add_get("/", chat_page)
    app.router.add_get("/ws", websocket)
    app.router.add_get("/healthz", healthz)
    if config.telegram.enabled and config.telegram.mode == "webhook":
        app.router.add_post(config.telegram.webhook_path, telegram_webhook)
    add_voice_routes(app)
    # Imported here: the panel's modules import GATEWAY from this one.
    from web.panel import add_panel_routes

    add_panel_routes(app, config.zone)
    app.router.add_static("/static", str(resources.files("web").joinpath("static")))
    return app


async def chat_page(request: web.Request) -> web.StreamResponse:
    page = resources.files("web").joinpath("templates", "chat.html").read_text(encoding="utf-8")
    gateway = request.app[GATEWAY]
    page = (
        page.replace("{{agent_name}}", _html_escape(gateway.config.agent.name))
        .replace("{{voice_enabled}}", "on" if gateway.config.voice.enabled else "off")
        .replace("{{voice_max_seconds}}", f"{gateway.config.voice.max_seconds:g}")
    )
    response = web.Response(text=page, content_type="text/html")
    token = request.query.get("token")
    if token:
        # Keep the token in a cookie so the page's own requests carry it.
        response.set_cookie(guard.TOKEN_COOKIE, token, httponly=True, samesite="Strict")
    return response


def _html_escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


async def websocket(request: web.Request) -> web.StreamResponse:
    return await request.app[GATEWAY].webchat.handle(request)


async def telegram_webhook(request: web.Request) -> web.StreamResponse:
    telegram = request.app[GATEWAY].telegram
    if telegram is None:
        raise web.HTTPNotFound()
    return await telegram.handle_webhook(request)


async def healthz(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    body: dict[str, Any] = {
        "status": "ok",
        "version": __version__,
        "brain": gateway.brain.name,
        "turns_in_flight": gateway.router.turns_in_flight,
        "stages": {
            "context": [stage.name for stage in gateway.pipeline.stages],
            "after_turn": [stage.name for stage in gateway.pipeline.after_stages],
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
