"""Sending to Telegram: ordered delivery per chat, typing indicators, clean
splitting under the length limit, flood control, and Bot API errors mapped to ours.

Replies go out as plain text (no ``parse_mode``). A model writes Markdown of
its own taste; MarkdownV2 or HTML would need that text converted and escaped
exactly, and one missed character makes Telegram refuse the whole message
("can't parse entities"). Plain text is safe by construction, shows every
character as written, and leaves no escape sequence that a split could cut.

Telegram counts a message's length in UTF-16 code units (an emoji outside the
BMP counts twice), so the splitter does too.
"""

from __future__ import annotations

import asyncio
import datetime as dtm
import logging
import re
import time
import unicodedata
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from telegram import Bot
from telegram.constants import ChatAction
from telegram.error import BadRequest, Forbidden, RetryAfter, TelegramError
from telegram.ext import BaseRateLimiter
from telegram.warnings import PTBDeprecationWarning

from gateway.errors import AgentGWError
from gateway.supervisor import TaskSupervisor
from voice.base import SpeechAudio, Transcript

log = logging.getLogger(__name__)

T = TypeVar("T")

TELEGRAM_MAX_CHARS = 4096
# Sentence ends (also the ideographic and fullwidth ones), closing quotes, then space.
_SENTENCE_END = re.compile("[.!?\u2026\u3002\uff01\uff1f][\"'\u201d\u2019)\\]]*\\s+")
# Characters that belong to the one before them: never start a part with one.
_JOINERS = {"\u200d", "\ufe0e", "\ufe0f"}


def utf16_len(text: str) -> int:
    """Length as Telegram counts it."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _fitting_prefix(text: str, limit: int) -> int:
    """How many characters of ``text`` fit in ``limit`` UTF-16 units."""
    units = 0
    for index, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def _cut_point(text: str, end: int) -> int:
    """Where to end a part that may use ``text[:end]``: the cleanest boundary."""
    floor = max(1, end // 4)  # a boundary very early would leave a stub of a message
    window = text[:end]
    for separator in ("\n\n", "\n"):
        at = window.rfind(separator, floor)
        if at != -1:
            return at
    sentence_ends = [m.end() for m in _SENTENCE_END.finditer(window, floor)]
    if sentence_ends:
        return sentence_ends[-1]
    for at in range(end - 1, floor - 1, -1):
        if window[at].isspace():
            return at
    # One unbroken run longer than a message: cut it, but not inside a character
    # sequence (combining accents, emoji joined with ZWJ or variation selectors).
    cut = end
    while cut > 1 and (
        unicodedata.combining(text[cut]) or text[cut] in _JOINERS or text[cut - 1] == "\u200d"
    ):
        cut -= 1
    return cut


def split_message(text: str, limit: int = TELEGRAM_MAX_CHARS) -> list[str]:
    """``text`` as messages of at most ``limit`` UTF-16 units, cut at the cleanest
    boundary available: paragraph, line, sentence, word, else inside the run.

    Whitespace at a cut is dropped (Telegram trims it anyway); nothing else is.
    """
    if limit < 2:
        raise ValueError("limit must allow at least two UTF-16 units")
    parts: list[str] = []
    rest = text.strip()
    while utf16_len(rest) > limit:
        cut = _cut_point(rest, _fitting_prefix(rest, limit))
        head, rest = rest[:cut].rstrip(), rest[cut:].lstrip()
        if head:
            parts.append(head)
    if rest:
        parts.append(rest)
    return parts


def retry_after_seconds(exc: RetryAfter) -> float:
    """The wait Telegram asked for, whichever type this PTB version returns."""
    with warnings.catch_warnings():
        # PTB 22 warns that the int form is going away; both forms are handled here.
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    if isinstance(value, dtm.timedelta):
        return value.total_seconds()
    return float(value)


class TokenBucket:
    """``rate`` events a second on average, ``burst`` at once."""

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    @property
    def full(self) -> bool:
        self._refill()
        return self._tokens >= self.burst

    async def take(self) -> None:
        while True:
            self._refill()
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self.rate)


JSONResult = bool | dict[str, Any] | list[dict[str, Any]]


class TelegramRateLimiter(BaseRateLimiter[int]):
    """Every Bot API call of the bot passes here: throttled, and resent after RetryAfter.

    This is the one retry layer for the calls it sees. ``getUpdates`` passes
    straight through: the Updater's polling loop has its own backoff. A
    RetryAfter pauses every call of the bot, not only the one that hit it, as
    Telegram's flood control applies to the bot.
    """

    def __init__(
        self,
        *,
        per_second: float,
        chat_per_second: float,
        chat_burst: int,
        max_retries: int,
    ) -> None:
        self.max_retries = max_retries
        self._chat_rate = chat_per_second
        self._chat_burst = chat_burst
        self._global = TokenBucket(per_second, max(1.0, per_second))
        self._chats: dict[int | str, TokenBucket] = {}
        self._resume_at = 0.0
        self.retries = 0

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        self._chats.clear()

    def _chat_bucket(self, chat_id: int | str) -> TokenBucket:
        bucket = self._chats.get(chat_id)
        if bucket is None:
            if len(self._chats) > 1000:
                # Forget chats that are idle (full bucket): they start full anyway.
                self._chats = {key: b for key, b in self._chats.items() if not b.full}
            bucket = self._chats[chat_id] = TokenBucket(self._chat_rate, self._chat_burst)
        return bucket

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, JSONResult]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> JSONResult:
        if endpoint == "getUpdates":
            return await callback(*args, **kwargs)
        max_retries = self.max_retries if rate_limit_args is None else rate_limit_args
        chat_id = data.get("chat_id")
        attempt = 0
        while True:
            pause = self._resume_at - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            await self._global.take()
            # A typing indicator is cheap and never worth delaying a reply for.
            if isinstance(chat_id, int | str) and endpoint != "sendChatAction":
                await self._chat_bucket(chat_id).take()
            try:
                return await callback(*args, **kwargs)
            except RetryAfter as exc:
                if attempt >= max_retries:
                    raise
                attempt += 1
                wait = retry_after_seconds(exc)
                log.info("telegram %s: flood control, resending in %.1f s", endpoint, wait)
                self.retries += 1
                self._resume_at = max(self._resume_at, time.monotonic() + wait)


class TelegramUnavailable(AgentGWError):
    """The Bot API could not be reached or answered with an error."""

    code = "telegram_unavailable"


class TelegramRefused(TelegramUnavailable):
    """The Bot API refused the call itself (bad request, or the person blocked the bot)."""

    code = "telegram_refused"


async def api(what: str, call: Awaitable[T]) -> T:
    """Await one Bot API call; its errors become ours here, at the edge."""
    try:
        return await call
    except (BadRequest, Forbidden) as exc:
        raise TelegramRefused(f"{what}: {exc.message}") from exc
    except TelegramError as exc:
        raise TelegramUnavailable(f"{what}: {exc.message}") from exc


class VoiceNotes(Protocol):
    """What voice notes need from the voice service (``voice.service.VoiceService``)."""

    async def transcribe(self, audio: bytes) -> Transcript: ...

    async def synthesize(self, text: str) -> SpeechAudio: ...

    async def encode(self, audio: SpeechAudio, fmt: Literal["ogg"]) -> bytes: ...


@dataclass(frozen=True)
class Outgoing:
    """One thing to say in a chat; ``voice`` also sends it as a voice note."""

    text: str
    voice: bool = False


# Telegram shows "typing…" for 5 s per sendChatAction.
TYPING_EVERY_S = 4.0


@dataclass
class _Typing:
    pending: set[int] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _Outbox:
    queue: asyncio.Queue[Outgoing] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


class ChatSender:
    """Delivery to chats: one ordered outbox per chat, and typing while turns are open.

    Sending never runs in the caller: a turn publishing its reply is not held
    up by Telegram (or its flood control); every task is spawned on ``tasks``.
    """

    def __init__(
        self,
        bot: Callable[[], Bot],
        tasks: TaskSupervisor,
        *,
        max_chars: int,
        voice: VoiceNotes | None,
    ) -> None:
        self._bot = bot
        self._tasks = tasks
        self.max_chars = max_chars
        self.voice = voice
        self._typing: dict[int, _Typing] = {}
        self._outboxes: dict[int, _Outbox] = {}

    def post(self, chat_id: int, item: Outgoing) -> None:
        """Queue ``item`` for the chat; one sender per chat keeps the order."""
        box = self._outboxes.get(chat_id)
        if box is None:
            box = self._outboxes[chat_id] = _Outbox()
        box.queue.put_nowait(item)
        if box.task is None:
            try:
                box.task = self._tasks.spawn(
                    f"telegram-send-{chat_id}", self._deliver(chat_id, box)
                )
            except RuntimeError:  # the channel is closed: nothing goes out any more
                self._outboxes.pop(chat_id, None)
                log.info("telegram: chat %d: a message after shutdown was dropped", chat_id)

    async def drain(self, timeout: float) -> bool:
        """Wait for queued messages to go out; True when all went in time."""
        tasks = [box.task for box in self._outboxes.values() if box.task is not None]
        if not tasks:
            return True
        _done, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    def start_typing(self, chat_id: int, message_id: int) -> None:
        typing = self._typing.get(chat_id)
        if typing is None:
            typing = self._typing[chat_id] = _Typing()
            self._tasks.spawn(f"telegram-typing-{chat_id}", self._keep_typing(chat_id, typing))
        typing.pending.add(message_id)

    def stop_typing(self, chat_id: int, message_id: int) -> None:
        typing = self._typing.get(chat_id)
        if typing is not None:
            typing.pending.discard(message_id)
            if not typing.pending:
                typing.done.set()

    async def _keep_typing(self, chat_id: int, typing: _Typing) -> None:
        try:
            while not typing.done.is_set():
                try:
                    await api(
                        "sendChatAction", self._bot().send_chat_action(chat_id, ChatAction.TYPING)
                    )
                except TelegramUnavailable as exc:
                    log.debug("telegram: typing indicator not sent: %s", exc)
                try:
                    await asyncio.wait_for(typing.done.wait(), TYPING_EVERY_S)
                except TimeoutError:
                    continue
        finally:
            self._typing.pop(chat_id, None)

    async def _deliver(self, chat_id: int, box: _Outbox) -> None:
        try:
            while not box.queue.empty():
                item = box.queue.get_nowait()
                try:
                    await self._send(chat_id, item)
                except TelegramUnavailable as exc:
                    # Logged once, here; a reply is stored and stays in the history.
                    log.warning("telegram: chat %d: not delivered: %s", chat_id, exc)
        finally:
            box.task = None
            if box.queue.empty():
                self._outboxes.pop(chat_id, None)

    async def _send(self, chat_id: int, item: Outgoing) -> None:
        bot = self._bot()
        for part in split_message(item.text, self.max_chars) or ["\u2026"]:
            await api("sendMessage", bot.send_message(chat_id, part))
        if item.voice and self.voice is not None:
            try:
                speech = await self.voice.synthesize(item.text)
                if not speech.pcm:
                    return
                note = await self.voice.encode(speech, "ogg")
            except AgentGWError as exc:
                log.warning("telegram: chat %d: no voice reply: %s (%s)", chat_id, exc.code, exc)
                return
            duration = max(1, round(speech.duration_s))
            await api("sendVoice", bot.send_voice(chat_id, note, duration=duration))
