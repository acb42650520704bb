"""The Telegram channel: python-telegram-bot driven inside the gateway's event loop.

Lifecycle (never ``run_polling()``, which would own the loop):
``start`` builds the PTB ``Application`` and spawns one tracked task that
connects — ``initialize`` → ``updater.start_polling`` → ``start`` (polling),
or ``initialize`` → ``start`` → ``setWebhook`` (webhook) — so a Telegram
outage never holds up the gateway's start or its other channels: a failed
attempt is torn down and retried with capped backoff. Once polling, PTB's
own loop backs off when getUpdates fails, and ``telegram_updates`` screens
each answer first, so an update PTB cannot parse is skipped instead of
failing every poll (webhook bodies go through the same reader: a bad one is
a 400). ``stop_input`` stops taking
updates; ``aclose`` lets queued replies go out, then ``stop`` →
``shutdown``.

Inbound: private chats only (a conversation is one person). Strangers — ids
not in ``telegram.allowed_user_ids`` — get one polite refusal, ever; only a
counter is stored for them. Messages of one person are handled in arrival
order; text and voice notes become turns of the person's Telegram
conversation; commands: /start /help /link /remember /forget /persona /timezone.

Outbound: the channel subscribes to the hub for each conversation it
serves. A typing indicator is repeated while a turn is open; replies go out
in order through one outbox per chat, as plain text split under Telegram's
limit (``telegram_send``), plus a voice note for turns that came as one.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import enum
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from telegram import Message, Update, User
from telegram.constants import ChatAction, ChatType
from telegram.error import InvalidToken, TelegramError
from telegram.ext import Application, ContextTypes, TypeHandler

from channels.telegram_send import (
    ChatSender,
    Outgoing,
    TelegramRateLimiter,
    VoiceNotes,
    api,
)
from channels.telegram_text import (
    HELP,
    LINK_HOWTO,
    REFUSAL,
    TIMEZONE_HOWTO,
    RateWindow,
    greeting,
    parse_command,
    problem_text,
    timezone_text,
    usage,
)
from channels.telegram_updates import UnreadableUpdate, UpdatesRequest, read_update
from gateway.clock import zone_name
from gateway.config import Config
from gateway.errors import (
    AgentGWError,
    AudioTooLarge,
    MalformedFrame,
    RateLimited,
    SilentAudio,
    VoiceUnavailable,
)
from gateway.hub import ConversationHub
from gateway.linking import LinkCodes
from gateway.messages import Inbound, TurnEvent, TurnEventKind
from gateway.router import Router
from gateway.store.repo import Address, count_refusal
from gateway.supervisor import TaskSupervisor
from gateway.untrusted import loads
from gateway.zones import PersonZones

log = logging.getLogger(__name__)

CHANNEL = "telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
CONNECT_FIRST_DELAY_S = 1.0
CONNECT_MAX_DELAY_S = 60.0

TelegramApp = Application[Any, Any, Any, Any, Any, Any]


@dataclass(frozen=True)
class TelegramSettings:
    token: str = field(repr=False)
    mode: Literal["polling", "webhook"]
    webhook_url: str
    webhook_secret: str = field(repr=False)
    allowed_user_ids: frozenset[int]
    poll_timeout_s: float
    base_url: str
    base_file_url: str
    max_message_chars: int
    rate_per_minute: int
    send_per_second: float
    chat_send_per_second: float
    chat_burst: int
    max_retries: int
    send_voice_replies: bool
    max_voice_bytes: int

    @classmethod
    def from_config(cls, config: Config) -> TelegramSettings:
        tg = config.telegram
        return cls(
            token=config.telegram_bot_token,
            mode=tg.mode,
            webhook_url=tg.webhook_url,
            webhook_secret=config.telegram_webhook_secret,
            allowed_user_ids=frozenset(tg.allowed_user_ids),
            poll_timeout_s=tg.poll_timeout_s,
            base_url=tg.base_url,
            base_file_url=tg.base_file_url,
            max_message_chars=tg.max_message_chars,
            rate_per_minute=tg.rate_per_minute,
            send_per_second=tg.send_per_second,
            chat_send_per_second=tg.chat_send_per_second,
            chat_burst=tg.chat_burst,
            max_retries=tg.max_retries,
            send_voice_replies=tg.send_voice_replies,
            max_voice_bytes=config.voice.max_bytes,
        )


class TelegramState(enum.StrEnum):
    STOPPED = "stopped"
    CONNECTING = "connecting"
    RUNNING = "running"
    FAILED = "failed"  # the token was rejected: retrying cannot help


class TelegramChannel:
    def __init__(
        self,
        settings: TelegramSettings,
        router: Router,
        hub: ConversationHub,
        links: LinkCodes,
        *,
        agent_name: str,
        persona_summary: str,
        voice: VoiceNotes | None = None,
        zones: PersonZones | None = None,
    ) -> None:
        self.settings = settings
        # Telegram says nothing of zones: /timezone sets the person's.
        self.zones = zones
        self.router = router
        self.hub = hub
        self.links = links
        self.agent_name = agent_name
        self.persona_summary = persona_summary
        self.voice = voice
        self.limiter = TelegramRateLimiter(
            per_second=settings.send_per_second,
            chat_per_second=settings.chat_send_per_second,
            chat_burst=settings.chat_burst,
            max_retries=settings.max_retries,
        )
        self.state = TelegramState.STOPPED
        self._app: TelegramApp | None = None
        self._tasks = TaskSupervisor()
        # Updates Telegram sent (for /metrics), whatever became of them.
        self.updates_received = 0
        self._connector: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._accepting = False
        self.sender = ChatSender(
            lambda: self.application.bot,
            self._tasks,
            max_chars=settings.max_message_chars,
            voice=voice,
        )
        self._subscriptions: dict[int, Callable[[], None]] = {}
        self._chat_of: dict[int, int] = {}
        self._voice_turns: set[int] = set()
        self._user_locks: dict[int, tuple[asyncio.Lock, int]] = {}
        self._rates: dict[int, RateWindow] = {}
        # Whether this process calls getUpdates (polling mode). In a cluster only the
        # holder of the poller's lease does (start_polling/stop_polling); the others
        # still send the replies of the turns they run.
        self.polls = True
        # False in a cluster: polling then follows the lease (and says so in the log).
        self.polls_always = True
        self._polling = asyncio.Lock()
        self._initialized = False

    # -- lifecycle ---------------------------------------------------------

    @property
    def application(self) -> TelegramApp:
        if self._app is None:
            raise RuntimeError("the Telegram channel is not started")
        return self._app

    async def wait_ready(self, timeout: float) -> bool:
        """True once connected to the Bot API (within ``timeout`` seconds)."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def start(self) -> None:
        """Build the bot and start connecting in the background; returns at once."""
        if self._app is not None:
            raise RuntimeError("the Telegram channel is already started")
        builder = (
            Application.builder()
            .token(self.settings.token)
            .base_url(self.settings.base_url)
            .base_file_url(self.settings.base_file_url)
            .rate_limiter(self.limiter)
            # Updates run concurrently; _person() keeps one person's in order.
            .concurrent_updates(True)
        )
        if self.settings.mode == "webhook":
            builder = builder.updater(None)
        else:
            # PTB's own default for getUpdates (one connection), screening each answer.
            builder = builder.get_updates_request(UpdatesRequest(connection_pool_size=1))
        app = builder.build()
        app.add_handler(TypeHandler(Update, self._on_update))
        app.add_error_handler(self._on_handler_error)
        self._app = app
        self._accepting = True
        self.state = TelegramState.CONNECTING
        self._connector = self._tasks.spawn("telegram-connect", self._connect(app))

    async def _connect(self, app: TelegramApp) -> None:
        delay = CONNECT_FIRST_DELAY_S
        while True:
            try:
                await self._open(app)
            except InvalidToken:
                # Not log.exception: the cause is clear and a stack trace would not help.
                log.error("telegram: the bot token was rejected; the channel stays off")  # noqa: TRY400
                self.state = TelegramState.FAILED
                await self._teardown(app)
                return
            except TelegramError as exc:
                log.warning("telegram: cannot connect (%s); retrying in %.0f s", exc, delay)
                await self._teardown(app)
                await asyncio.sleep(delay)
                delay = min(delay * 2, CONNECT_MAX_DELAY_S)
            except BaseException:
                await self._teardown(app)
                raise
            else:
                self.state = TelegramState.RUNNING
                self._ready.set()
                log.info("telegram: connected as @%s (%s)", app.bot.username, self.settings.mode)
                return

    async def _open(self, app: TelegramApp) -> None:
        self._initialized = False
        await app.initialize()
        async with self._polling:
            if self.polls:
                await self._start_updater(app)
            self._initialized = True
        await app.start()
        if self.settings.mode == "webhook":
            await app.bot.set_webhook(
                self.settings.webhook_url,
                secret_token=self.settings.webhook_secret,
                allowed_updates=["message"],
            )

    async def _start_updater(self, app: TelegramApp) -> None:
        if app.updater is not None and not app.updater.running:
            await app.updater.start_polling(
                timeout=dtm.timedelta(seconds=self.settings.poll_timeout_s),
                allowed_updates=["message"],
                error_callback=self._on_poll_error,
            )
            if not self.polls_always:
                log.info("telegram: polling (this process holds the poller's lease)")

    async def start_polling(self) -> None:
        """Call getUpdates from now on (a cluster's poller lease was taken); when the
        bot is still connecting, it polls once connected. Telegram keeps what no
        poller confirmed, so the updates a dead poller never read come here."""
        async with self._polling:
            self.polls = True
            if self._initialized and self._accepting and self._app is not None:
                await self._start_updater(self._app)

    async def stop_polling(self) -> None:
        """Stop calling getUpdates (the lease was lost or given back)."""
        async with self._polling:
            self.polls = False
            app = self._app
            if app is not None and app.updater is not None and app.updater.running:
                await app.updater.stop()
                log.info("telegram: stopped polling (the poller's lease went elsewhere)")

    @staticmethod
    def _on_poll_error(exc: TelegramError) -> None:
        # PTB backs off by itself (up to 30 s); one line per failure, no stack trace.
        log.warning("telegram: getUpdates failed: %s", exc)

    @staticmethod
    async def _teardown(app: TelegramApp) -> None:
        """Close whatever an attempt opened, in reverse."""
        if app.updater is not None and app.updater.running:
            await app.updater.stop()
        if app.running:
            await app.stop()
        await app.shutdown()
        # A failed initialize leaves the bot's HTTP clients open; app.shutdown skips them.
        await app.bot.shutdown()

    async def stop_input(self) -> None:
        """Stop taking updates; replies of turns in flight can still go out."""
        self._accepting = False
        app = self._app
        if app is not None and app.updater is not None and app.updater.running:
            await app.updater.stop()

    async def aclose(self, grace_s: float = 5.0) -> None:
        """Finish the updates already received, send what is queued (up to
        ``grace_s``), then stop and shut the bot down."""
        if self._connector is not None and not self._connector.done():
            self._connector.cancel()  # still connecting: it tears down what it opened
            await asyncio.gather(self._connector, return_exceptions=True)
        await self.stop_input()
        if self._app is not None and self._app.running:
            # Handles what is left in the update queue (the router, stopped by
            # now, answers those with shutting_down) and waits for the handlers.
            await self._app.stop()
        if not await self.sender.drain(grace_s):
            log.warning("telegram: replies still queued at shutdown were dropped")
        for unsubscribe in self._subscriptions.values():
            unsubscribe()
        self._subscriptions.clear()
        await self._tasks.aclose()
        if self._app is not None:
            await self._teardown(self._app)
        self.state = TelegramState.STOPPED
        self._ready.clear()

    # -- webhook -----------------------------------------------------------

    async def handle_webhook(self, request: web.Request) -> web.Response:
        """POST from Telegram: checked by its secret header, queued for the bot."""
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.settings.webhook_secret.encode()):
            raise web.HTTPForbidden(text="wrong or missing secret token")
        if not self._accepting or not self._ready.is_set():
            # Telegram retries a failed delivery later.
            raise web.HTTPServiceUnavailable(text="the Telegram channel is not running")
        try:
            update = read_update(loads(await request.read()), self.application.bot)
        except (MalformedFrame, UnreadableUpdate) as exc:
            log.info("telegram: refused a webhook body: %s", exc)
            error = {"code": exc.code, "message": f"not a Telegram update: {exc}"}
            return web.json_response({"ok": False, "error": error}, status=400)
        await self.application.update_queue.put(update)
        return web.json_response({"ok": True})

    # -- inbound -----------------------------------------------------------

    @asynccontextmanager
    async def _person(self, user_id: int) -> AsyncIterator[None]:
        """One person's updates one at a time, in arrival order (asyncio locks are FIFO)."""
        lock, users = self._user_locks.get(user_id, (asyncio.Lock(), 0))
        self._user_locks[user_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._user_locks[user_id]
            if users == 1:
                del self._user_locks[user_id]
            else:
                self._user_locks[user_id] = (lock, users - 1)

    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        self.updates_received += 1
        message = update.message
        if message is None or message.from_user is None or message.from_user.is_bot:
            return
        if message.chat.type != ChatType.PRIVATE:
            return  # groups mix people in one chat; a conversation here is one person
        user = message.from_user
        async with self._person(user.id):
            if user.id not in self.settings.allowed_user_ids:
                await self._refuse(user.id, message.chat_id)
                return
            try:
                await self._dispatch(message, user)
            except AgentGWError as exc:
                log.info("telegram: chat %d: %s (%s)", message.chat_id, exc.code, exc)
                self.sender.post(message.chat_id, Outgoing(problem_text(exc)))

    async def _on_handler_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("telegram: an update failed", exc_info=context.error)

    async def _refuse(self, user_id: int, chat_id: int) -> None:
        count = await count_refusal(self.router.store, CHANNEL, str(user_id))
        if count == 1:
            self.sender.post(chat_id, Outgoing(REFUSAL))
        log.info("telegram: refused a user not on the allowlist (%d times)", count)

    async def _dispatch(self, message: Message, user: User) -> None:
        self._check_rate(user.id)
        command = parse_command(message)
        if command is not None:
            await self._on_command(command[0], command[1], message, user)
        elif message.voice is not None or message.audio is not None:
            await self._on_voice(message, user)
        elif message.text:
            await self._turn(message, user, message.text)
        else:
            self.sender.post(message.chat_id, Outgoing("I can read text messages and voice notes."))

    def _check_rate(self, user_id: int) -> None:
        window = self._rates.setdefault(user_id, RateWindow(self.settings.rate_per_minute))
        if not window.allow(asyncio.get_running_loop().time()):
            raise RateLimited(f"more than {self.settings.rate_per_minute} messages a minute")

    async def _address(self, user: User) -> Address:
        # Resolved for every message: /link can move the identity to another person.
        return await self.router.address(CHANNEL, str(user.id), user.full_name)

    async def _turn(self, message: Message, user: User, text: str, *, voice: bool = False) -> None:
        address = await self._address(user)
        self._watch(address.conversation_id, message.chat_id)
        stored = await self.router.accept(
            Inbound(
                channel=CHANNEL,
                sender=str(user.id),
                text=text,
                received_at=message.date,
                # Telegram may deliver an update twice (webhook retries, a restart
                # before the offset was confirmed): the store answers it once.
                client_id=f"tg-{message.chat_id}-{message.message_id}",
                display_name=user.full_name,
            ),
            address,
        )
        if voice and not stored.duplicate:
            # The turn runs in another task, so its reply cannot be out before this.
            self._voice_turns.add(stored.message_id)

    async def _on_voice(self, message: Message, user: User) -> None:
        media = message.voice or message.audio
        if media is None:
            return
        if self.voice is None:
            raise VoiceUnavailable("this gateway has no speech-to-text")
        if media.file_size and media.file_size > self.settings.max_voice_bytes:
            raise AudioTooLarge(f"voice note is over {self.settings.max_voice_bytes} bytes")
        bot = self.application.bot
        await api("sendChatAction", bot.send_chat_action(message.chat_id, ChatAction.TYPING))
        file = await api("getFile", bot.get_file(media.file_id))
        audio = bytes(await api("download", file.download_as_bytearray()))
        transcript = await self.voice.transcribe(audio)
        if not transcript.text.strip():
            raise SilentAudio("no speech in the voice note")
        await self._turn(message, user, transcript.text.strip(), voice=True)

    async def _on_command(self, name: str, args: str, message: Message, user: User) -> None:
        chat_id = message.chat_id
        if name == "start":
            self.sender.post(chat_id, Outgoing(greeting(self.agent_name, user.first_name)))
        elif name == "help":
            self.sender.post(chat_id, Outgoing(HELP))
        elif name == "persona":
            self.sender.post(chat_id, Outgoing(self.persona_summary))
        elif name in ("remember", "forget"):
            if not args:
                self.sender.post(chat_id, Outgoing(usage(name)))
                return
            # The memory layer acts on "remember …" / "forget …" turns.
            await self._turn(message, user, f"{name} {args}")
        elif name == "link":
            await self._link(args, message, user)
        elif name == "timezone":
            await self._timezone(args, message, user)
        else:
            self.sender.post(chat_id, Outgoing(f"I don't know /{name}. /help lists what I can do."))

    async def _timezone(self, args: str, message: Message, user: User) -> None:
        if self.zones is None:
            self.sender.post(message.chat_id, Outgoing("Time zones are not kept here."))
            return
        address = await self._address(user)
        if not args:
            zone = await self.zones.of(address.person_id)
            self.sender.post(message.chat_id, Outgoing(timezone_text(zone_name(zone))))
            return
        name = args.split(maxsplit=1)[0]
        if await self.zones.report(address.person_id, name):
            text = f'Got it: your time zone is {name}. "Yesterday" now means your yesterday.'
        else:
            text = f"{name} is not a time zone I know. {TIMEZONE_HOWTO}"
        self.sender.post(message.chat_id, Outgoing(text))

    async def _link(self, args: str, message: Message, user: User) -> None:
        if not args:
            self.sender.post(message.chat_id, Outgoing(LINK_HOWTO))
            return
        address = await self._address(user)
        result = await self.links.redeem(args, address)
        text = (
            "Linked! This Telegram account and that browser are now one person to me: "
            "what you tell me here, I remember there, and the other way round."
            if result.merged
            else "This account was already linked to that browser."
        )
        self.sender.post(message.chat_id, Outgoing(text))

    # -- outbound ----------------------------------------------------------

    def reach(self, conversation_id: int, external_id: str) -> None:
        """Deliver this conversation's events from now on, though its person has not
        written since the start (a forward trigger's message on its day): a private
        chat's id is its user's id."""
        if external_id.isdigit():
            self._watch(conversation_id, int(external_id))

    def _watch(self, conversation_id: int, chat_id: int) -> None:
        self._chat_of[conversation_id] = chat_id
        if conversation_id not in self._subscriptions:
            self._subscriptions[conversation_id] = self.hub.subscribe(
                conversation_id, self._on_event
            )

    async def _on_event(self, event: TurnEvent) -> None:
        chat_id = self._chat_of.get(event.conversation_id)
        if chat_id is None:
            return
        if event.kind is TurnEventKind.MESSAGE:
            self.sender.start_typing(chat_id, event.message_id)
        elif event.kind is TurnEventKind.REPLY:
            self.sender.stop_typing(chat_id, event.message_id)
            voice = event.message_id in self._voice_turns
            self._voice_turns.discard(event.message_id)
            wants_voice = voice and self.settings.send_voice_replies and self.voice is not None
            self.sender.post(chat_id, Outgoing(event.text, voice=wants_voice))
        elif event.kind is TurnEventKind.ERROR:
            self.sender.stop_typing(chat_id, event.message_id)
            self._voice_turns.discard(event.message_id)
            note = f"{event.text} ({event.code})"
            # A reply that broke off: what was written so far, marked as cut, then why.
            # (An empty reply is an error with no partial: only the note goes out.)
            if event.partial.strip():
                note = f"{event.partial.rstrip()} […]\n\n{note}"
            self.sender.post(chat_id, Outgoing(note))
