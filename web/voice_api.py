"""``POST /api/voice``: speak to the agent over HTTP; ``GET /api/voice/audio/{name}``.

Request
    ``POST /api/voice[?session=<id>][&stream=1][&format=ogg|wav]``
    The audio is either a multipart form field named ``audio`` or the raw
    request body with its Content-Type (``audio/ogg``, ``audio/webm``,
    ``audio/wav``, ``audio/mpeg``…; any format PyAV decodes is accepted).
    ``session`` names the webchat session, the same id as ``/ws?session=``
    (8-100 letters, digits, ``-`` or ``_``), so the spoken turn lands in that
    page's conversation and every open page sees it live. Without it a new
    session is made and returned. Access rules are those of every other path.

Plain reply (no ``stream``): ``200`` with
    ``{"session", "transcript", "language", "duration_s", "message_id",
    "reply_id", "reply_text", "audio_url"}`` — ``audio_url`` is relative
    (``/api/voice/audio/<32 hex>.ogg``), or null when the reply has nothing
    to say aloud.

Streamed reply (``stream=1``): ``200``, ``Content-Type: application/x-ndjson``,
one JSON object per line, in this order:
    ``{"type": "transcript", "session", "text", "language", "duration_s", "message_id"}``
    ``{"type": "delta", "text"}``                     … the reply as it is written
    ``{"type": "audio", "index", "url", "text", "duration_s"}``
        one per spoken sentence, in playing order, interleaved with the
        deltas: speech starts as soon as the first sentence is complete
    ``{"type": "reply", "reply_id", "text"}``         the whole reply, stored
    ``{"type": "done", "audio_urls": [...]}``         last line on success
    ``{"type": "error", "code", "message", "status"}`` last line on failure
A page plays the ``audio`` URLs one after another as they arrive. (A page
that also has ``/ws`` open on the same session gets the transcript as a
``message`` frame and the reply as ``delta``/``reply`` frames there too, so
it may draw text from either.)

Errors before the reply starts are plain JSON with an HTTP status:
    ``{"error": {"code", "message"}, ...what is already known}``
    400 bad audio (``undecodable_audio``, ``silent_audio``, ``audio_too_long``,
    ``no_audio``, ``bad_upload``, ``bad_session``, ``bad_format``), 413 ``audio_too_large``,
    503 ``voice_disabled`` / ``voice_unavailable`` / ``shutting_down``,
    502 the turn failed (its error code, e.g. ``brain_timeout``),
    504 ``reply_timeout``.

Why an upload endpoint and not audio frames on ``/ws``: push-to-talk records
a whole utterance and Whisper transcribes whole clips, so streaming audio
while the button is held would not start the transcription any sooner; one
upload on release is a ``fetch`` of the ``MediaRecorder`` blob, keeps the
WebSocket a plain JSON protocol, and gets the access rules, body-size limits
and JSON errors of HTTP for free. NDJSON rather than SSE because the request
is a POST with a body (``EventSource`` only does GET) and a ``fetch`` reader
splits NDJSON on newlines with no parser.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import BodyPartReader, web

from channels.webchat import CHANNEL
from gateway.config import VoiceConfig
from gateway.errors import (
    AgentGWError,
    AudioTooLarge,
    InputError,
    StoreError,
    VoiceUnavailable,
)
from gateway.hub import ConversationHub
from gateway.messages import Inbound, TurnEvent, TurnEventKind
from gateway.router import Router, ShuttingDown
from gateway.store.repo import Address
from voice.base import SpeechAudio
from voice.files import AudioFiles, AudioFormat, content_type
from voice.service import VoiceService
from voice.tts import SentenceSplitter

log = logging.getLogger(__name__)

AUDIO_PATH = "/api/voice/audio/"
# Same rule as /ws?session=.
_SESSION = re.compile(r"^[A-Za-z0-9_-]{8,100}$")
# Room for multipart boundaries and headers on top of the audio itself.
_MULTIPART_SLACK = 16 * 1024
_READ_CHUNK = 64 * 1024


class ReplyTimeout(AgentGWError):
    code = "reply_timeout"


class TurnFailed(AgentGWError):
    """The gateway stored the message but the brain did not answer."""

    code = "turn_failed"


def status_for(error: AgentGWError) -> int:
    if isinstance(error, AudioTooLarge):
        return 413
    if isinstance(error, InputError):
        return 400
    if isinstance(error, VoiceUnavailable | ShuttingDown | StoreError):
        return 503
    if isinstance(error, TurnFailed):
        return 502
    if isinstance(error, ReplyTimeout):
        return 504
    return 500


def error_body(error: AgentGWError, **known: Any) -> dict[str, Any]:
    return {"error": {"code": error.code, "message": str(error)}, **known}


def error_response(error: AgentGWError, **known: Any) -> web.Response:
    return web.json_response(error_body(error, **known), status=status_for(error))


async def read_audio(request: web.Request, max_bytes: int) -> bytes:
    """The uploaded audio from a multipart ``audio`` field or the raw body, size-checked.

    Read in chunks with our own limit (not ``client_max_size``), so an
    oversized upload is refused as soon as it passes ``max_bytes``.
    """
    multipart = request.content_type.startswith("multipart/")
    declared = request.content_length
    if declared is not None and declared > max_bytes + (_MULTIPART_SLACK if multipart else 0):
        raise AudioTooLarge(f"audio is {declared} bytes; the limit is {max_bytes}")
    if multipart:
        try:
            reader = await request.multipart()
            async for part in reader:
                if not isinstance(part, BodyPartReader) or part.name != "audio":
                    continue
                return await _read_limited(part.read_chunk, max_bytes)
        except ValueError as exc:  # aiohttp's word for a broken multipart body
            raise InputError(f"malformed multipart body: {exc}", code="bad_upload") from exc
        raise InputError("the form has no 'audio' field", code="no_audio")
    return await _read_limited(request.content.read, max_bytes)


async def _read_limited(read: Callable[[int], Awaitable[bytes]], max_bytes: int) -> bytes:
    buffer = bytearray()
    while chunk := await read(_READ_CHUNK):
        buffer += chunk
        if len(buffer) > max_bytes:
            raise AudioTooLarge(f"audio is over the limit of {max_bytes} bytes")
    if not buffer:
        raise InputError("no audio was sent", code="no_audio")
    return bytes(buffer)


class TurnWatch:
    """The events of one conversation, buffered from before the message is accepted.

    Subscribing first means the reply cannot be published before we listen;
    the hub's callback only enqueues, so a slow client never slows the turn.
    """

    def __init__(self, hub: ConversationHub, conversation_id: int) -> None:
        self._queue: asyncio.Queue[TurnEvent] = asyncio.Queue()
        self._unsubscribe = hub.subscribe(conversation_id, self._on_event)

    async def _on_event(self, event: TurnEvent) -> None:
        self._queue.put_nowait(event)

    async def events(self, message_id: int, timeout_s: float) -> AsyncIterator[TurnEvent]:
        """DELTA events of that message's turn, then its REPLY or ERROR, then stop."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                event = await asyncio.wait_for(self._queue.get(), max(remaining, 0.0))
            except TimeoutError:
                raise ReplyTimeout(f"no reply within {timeout_s:g} s") from None
            if event.message_id != message_id:
                continue  # another turn of the same conversation
            if event.kind in (TurnEventKind.DELTA, TurnEventKind.REPLY, TurnEventKind.ERROR):
                yield event
            if event.kind in (TurnEventKind.REPLY, TurnEventKind.ERROR):
                return

    def close(self) -> None:
        self._unsubscribe()


@dataclass(frozen=True)
class SpokenTurn:
    session: str
    address: Address
    message_id: int
    watch: TurnWatch


class VoiceEndpoint:
    """The handlers of /api/voice, with what they need from the gateway."""

    def __init__(
        self,
        router: Router,
        hub: ConversationHub,
        voice: VoiceService | None,
        files: AudioFiles,
        config: VoiceConfig,
    ) -> None:
        self.router = router
        self.hub = hub
        self.voice = voice
        self.files = files
        self.config = config

    async def post(self, request: web.Request) -> web.StreamResponse:
        try:
            session, fmt, streamed = self._options(request)
            voice = self._voice()
            audio = await read_audio(request, self.config.max_bytes)
            transcript = await voice.transcribe(audio)
        except AgentGWError as exc:
            log.info("voice request refused: %s (%s)", exc.code, exc)
            return error_response(exc)
        heard = {
            "session": session,
            "transcript": transcript.text,
            "language": transcript.language,
            "duration_s": round(transcript.duration_s, 3),
        }
        try:
            turn = await self._start_turn(session, transcript.text)
        except AgentGWError as exc:
            log.warning("voice turn not accepted: %s (%s)", exc.code, exc)
            return error_response(exc, **heard)
        try:
            if streamed:
                return await self._streamed(request, voice, turn, heard, fmt)
            return await self._plain(voice, turn, heard, fmt)
        finally:
            turn.watch.close()

    async def audio(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = await asyncio.to_thread(self.files.path_of, name)
        if path is None:
            return web.json_response(
                {"error": {"code": "not_found", "message": "no such audio (expired?)"}},
                status=404,
            )
        return web.FileResponse(
            path,
            headers={
                "Content-Type": content_type(name),
                "Cache-Control": "private, max-age=3600, immutable",
            },
        )

    def _options(self, request: web.Request) -> tuple[str, AudioFormat, bool]:
        session = request.query.get("session") or secrets.token_urlsafe(16)
        if not _SESSION.match(session):
            raise InputError("?session= must be 8-100 letters, digits, - or _", code="bad_session")
        fmt = request.query.get("format", self.config.reply_format)
        if fmt not in ("ogg", "wav"):
            raise InputError("?format= must be ogg or wav", code="bad_format")
        streamed = request.query.get("stream", "") in ("1", "true", "yes")
        return session, "ogg" if fmt == "ogg" else "wav", streamed

    def _voice(self) -> VoiceService:
        if self.voice is None:
            raise VoiceUnavailable("voice is turned off (voice.enabled)", code="voice_disabled")
        return self.voice

    async def _start_turn(self, session: str, text: str) -> SpokenTurn:
        address = await self.router.address(CHANNEL, session)
        watch = TurnWatch(self.hub, address.conversation_id)
        try:
            stored = await self.router.accept(
                Inbound(channel=CHANNEL, sender=session, text=text, received_at=datetime.now(UTC)),
                address,
            )
        except BaseException:
            watch.close()
            raise
        return SpokenTurn(session, address, stored.message_id, watch)

    async def _plain(
        self, voice: VoiceService, turn: SpokenTurn, heard: dict[str, Any], fmt: AudioFormat
    ) -> web.Response:
        known: dict[str, Any] = {**heard, "message_id": turn.message_id}
        try:
            reply = await self._final_event(turn)
            known.update(reply_id=reply.reply_id, reply_text=reply.text)
            speech = await voice.synthesize(reply.text)
            audio_url = await self._save(voice, speech, fmt) if speech.pcm else None
        except AgentGWError as exc:
            log.warning("voice turn %d: %s (%s)", turn.message_id, exc.code, exc)
            return error_response(exc, **known)
        return web.json_response({**known, "audio_url": audio_url})

    async def _final_event(self, turn: SpokenTurn) -> TurnEvent:
        async for event in turn.watch.events(turn.message_id, self.config.reply_timeout_s):
            if event.kind is TurnEventKind.REPLY:
                return event
            if event.kind is TurnEventKind.ERROR:
                raise TurnFailed(event.text, code=event.code or TurnFailed.code)
        raise ReplyTimeout("the turn ended without a reply")

    async def _save(self, voice: VoiceService, speech: SpeechAudio, fmt: AudioFormat) -> str:
        data = await voice.encode(speech, fmt)
        name = await asyncio.to_thread(self.files.save, data, fmt)
        return AUDIO_PATH + name

    async def _streamed(
        self,
        request: web.Request,
        voice: VoiceService,
        turn: SpokenTurn,
        heard: dict[str, Any],
        fmt: AudioFormat,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/x-ndjson",
                "Cache-Control": "no-store",
                # Proxies such as nginx would otherwise hold lines back.
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        write_lock = asyncio.Lock()

        async def send(line: dict[str, Any]) -> None:
            async with write_lock:
                await response.write(json.dumps(line).encode("utf-8") + b"\n")

        sentences: asyncio.Queue[str | None] = asyncio.Queue()
        audio_urls: list[str] = []

        async def speak() -> None:
            index = 0
            while (sentence := await sentences.get()) is not None:
                # aclosing: a cancelled speaker stops Piper now, not when GC finds the stream.
                async with aclosing(voice.stream(sentence)) as clips:
                    async for clip in clips:
                        url = await self._save(voice, clip, fmt)
                        audio_urls.append(url)
                        await send(
                            {
                                "type": "audio",
                                "index": index,
                                "url": url,
                                "text": sentence,
                                "duration_s": round(clip.duration_s, 3),
                            }
                        )
                        index += 1

        speaker = asyncio.create_task(speak(), name=f"voice-speak-{turn.message_id}")
        try:
            await send(
                {
                    "type": "transcript",
                    "session": heard["session"],
                    "text": heard["transcript"],
                    "language": heard["language"],
                    "duration_s": heard["duration_s"],
                    "message_id": turn.message_id,
                }
            )
            splitter = SentenceSplitter()
            written = ""
            queued_any = False
            async for event in turn.watch.events(turn.message_id, self.config.reply_timeout_s):
                if event.kind is TurnEventKind.ERROR:
                    raise TurnFailed(event.text, code=event.code or TurnFailed.code)
                if event.kind is TurnEventKind.DELTA:
                    written += event.text
                    ready = splitter.feed(event.text)
                    await send({"type": "delta", "text": event.text})
                elif event.text.startswith(written):
                    # The stored reply is the truth: speak what no delta carried, too.
                    ready = [*splitter.feed(event.text[len(written) :]), *splitter.flush()]
                else:
                    ready = splitter.flush() if queued_any else [event.text]
                for sentence in ready:
                    sentences.put_nowait(sentence)
                    queued_any = True
                if event.kind is TurnEventKind.REPLY:
                    sentences.put_nowait(None)
                    await send({"type": "reply", "reply_id": event.reply_id, "text": event.text})
            await speaker
            await send({"type": "done", "audio_urls": audio_urls})
        except AgentGWError as exc:
            log.warning("voice turn %d: %s (%s)", turn.message_id, exc.code, exc)
            speaker.cancel()
            await _send_last(
                send,
                {"type": "error", "code": exc.code, "message": str(exc), "status": status_for(exc)},
            )
        except ConnectionError as exc:
            # The client went away; the turn itself is stored and goes on.
            log.info("voice stream for message %d closed by the client: %s", turn.message_id, exc)
        finally:
            if not speaker.done():
                speaker.cancel()
            await asyncio.gather(speaker, return_exceptions=True)
        return response


async def _send_last(
    send: Callable[[dict[str, Any]], Awaitable[None]], line: dict[str, Any]
) -> None:
    try:
        await send(line)
    except ConnectionError:
        log.info("could not send the last voice line: the client is gone")


VOICE_ENDPOINT = web.AppKey("voice_endpoint", VoiceEndpoint)


async def post_voice(request: web.Request) -> web.StreamResponse:
    return await request.app[VOICE_ENDPOINT].post(request)


async def get_voice_audio(request: web.Request) -> web.StreamResponse:
    return await request.app[VOICE_ENDPOINT].audio(request)


def add_voice_routes(app: web.Application) -> None:
    app.router.add_post("/api/voice", post_voice)
    app.router.add_get(AUDIO_PATH + "{name}", get_voice_audio)
