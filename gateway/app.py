"""The composition root: builds every part in order, tears down in reverse."""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from importlib import resources

from aiohttp import web

from channels.webchat import WebchatChannel, WebchatLimits
from gateway import __version__
from gateway.brains import build_brain
from gateway.brains.base import Brain
from gateway.config import Config
from gateway.context import ClockStage, PersonaStage, RecentHistoryStage, load_persona
from gateway.hub import ConversationHub
from gateway.pipeline import PipelineSettings, TurnPipeline
from gateway.prompt import ContextStage
from gateway.router import Router
from gateway.store import Store
from gateway.store.repo import fail_unfinished_turns
from gateway.supervisor import TaskSupervisor

log = logging.getLogger(__name__)

TOKEN_COOKIE = "agentgw_token"


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


GATEWAY = web.AppKey("gateway", Gateway)


def build_stages(config: Config) -> list[ContextStage]:
    persona = load_persona(config.agent.persona_file, config.agent.name)
    return [
        PersonaStage(persona),
        ClockStage(),
        RecentHistoryStage(config.context.history_tokens),
    ]


def create_app(config: Config, *, brain: Brain | None = None) -> web.Application:
    """The aiohttp application; ``brain`` replaces the configured one (tests)."""
    app = web.Application(
        middlewares=[access_middleware(config)],  # type: ignore[list-item]
        client_max_size=max(config.webchat.max_frame_bytes, 1 << 20),
    )

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        store = Store(config.database_url, echo=config.store.echo)
        await store.open()
        supervisor = TaskSupervisor()
        the_brain = brain if brain is not None else build_brain(config)
        try:
            failed = await fail_unfinished_turns(store)
            if failed:
                log.warning("%d turns were interrupted by the last stop; marked failed", failed)
            hub = ConversationHub()
            pipeline = TurnPipeline(
                store,
                the_brain,
                build_stages(config),
                hub,
                PipelineSettings(
                    max_tokens=config.brain.reply_max_tokens,
                    temperature=config.brain.temperature,
                    timeout_s=config.brain.timeout_s,
                    history_max_messages=config.context.history_max_messages,
                    prompt_caching=config.claude.prompt_caching,
                ),
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
                ),
                agent_name=config.agent.name,
                brain_name=the_brain.name,
            )
            app[GATEWAY] = Gateway(
                config, store, the_brain, hub, supervisor, pipeline, router, webchat
            )
            log.info("agentgw %s ready: brain=%s store=%s", __version__, the_brain.name, store.url)
            yield
            # on_shutdown already stopped input and closed the sockets.
            await router.drain(config.server.shutdown_grace_s)
            await supervisor.aclose()
        finally:
            await supervisor.aclose()
            await the_brain.aclose()
            await store.close()

    async def on_shutdown(app: web.Application) -> None:
        gateway = app.get(GATEWAY)
        if gateway is not None:
            gateway.router.stop_accepting()
            await gateway.webchat.close_all()

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(on_shutdown)
    app.router.add_get("/", chat_page)
    app.router.add_get("/ws", websocket)
    app.router.add_get("/healthz", healthz)
    app.router.add_static("/static", str(resources.files("web").joinpath("static")))
    return app


async def chat_page(request: web.Request) -> web.StreamResponse:
    page = resources.files("web").joinpath("templates", "chat.html").read_text(encoding="utf-8")
    gateway = request.app[GATEWAY]
    page = page.replace("{{agent_name}}", _html_escape(gateway.config.agent.name))
    response = web.Response(text=page, content_type="text/html")
    token = request.query.get("token")
    if token:
        # Keep the token in a cookie so the page's own requests carry it.
        response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict")
    return response


def _html_escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


async def websocket(request: web.Request) -> web.StreamResponse:
    return await request.app[GATEWAY].webchat.handle(request)


async def healthz(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    return web.json_response(
        {
            "status": "ok",
            "version": __version__,
            "brain": gateway.brain.name,
            "turns_in_flight": gateway.router.turns_in_flight,
        }
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def access_middleware(config: Config) -> Middleware:
    """Open on loopback; elsewhere every route but /healthz needs the access token."""
    token = config.server.access_token
    required = bool(token) and not config.is_loopback

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not required or request.path in ("/healthz",) or request.path.startswith("/static/"):
            return await handler(request)
        given = (
            request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            or request.query.get("token", "")
            or request.cookies.get(TOKEN_COOKIE, "")
        )
        if not given or not hmac.compare_digest(given.encode(), token.encode()):
            raise web.HTTPUnauthorized(
                text="an access token is required: Authorization: Bearer <token> or ?token=",
            )
        return await handler(request)

    return middleware
