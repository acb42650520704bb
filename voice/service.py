"""The voice service: owns Whisper and Piper, runs them off the event loop.

Each model lives in its own single worker thread: it is loaded there once
(on first use, or at start with ``voice.preload``), every call to it runs
there, and two transcriptions queue instead of fighting over 2 cores, while
speech for one reply can be made during the transcription of the next.

Used by ``/api/voice`` (web/voice_api.py) and the Telegram channel:

    async with VoiceService.from_config(config) as voice:
        transcript = await voice.transcribe(ogg_bytes)      # Transcript
        speech = await voice.synthesize("Hello there.")     # SpeechAudio
        async for sentence in voice.stream(reply_text):     # SpeechAudio each
            ...
        note = await voice.encode(speech, "ogg")            # OGG/Opus bytes
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from gateway.config import Config, VoiceConfig
from gateway.errors import AgentGWError, VoiceUnavailable
from voice.audio import AudioLimits, check_size, decode_audio, encode_ogg_opus, encode_wav
from voice.base import SpeechAudio, Transcript
from voice.files import AudioFormat
from voice.stt import WhisperEngine, whisper_model_dir
from voice.tts import PiperEngine, piper_voice_paths

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Done:
    """Marks the end of a sentence stream."""


_DONE = _Done()


class VoiceService:
    """Speech to text and text to speech (implements both protocols of voice.base)."""

    def __init__(self, config: VoiceConfig, cache_dir: Path) -> None:
        self.config = config
        self.cache_dir = cache_dir
        self.limits = AudioLimits(
            max_bytes=config.max_bytes,
            max_seconds=config.max_seconds,
            silence_dbfs=config.silence_dbfs,
        )
        self._stt_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentgw-stt")
        self._tts_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentgw-tts")
        self._stt: WhisperEngine | None = None
        self._tts: PiperEngine | None = None
        self._stt_lock = asyncio.Lock()
        self._tts_lock = asyncio.Lock()
        self._closed = False
        # Seconds the models worked (for /metrics); each pool has one worker, so
        # each sum has one writer.
        self.stt_seconds = 0.0
        self.tts_seconds = 0.0

    @classmethod
    def from_config(cls, config: Config) -> VoiceService:
        return cls(config.voice, config.data_dir / "models")

    @property
    def stt_name(self) -> str:
        return f"whisper-{self.config.stt_model}"

    @property
    def tts_name(self) -> str:
        return "piper-en_US-joe-medium"

    @property
    def loaded(self) -> bool:
        return self._stt is not None and self._tts is not None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def load(self) -> None:
        """Load both models now (each in its worker thread, side by side)."""
        await asyncio.gather(self._stt_engine(), self._tts_engine())

    async def preload(self) -> None:
        """``load`` for a background task at start: a missing model is logged, not raised."""
        try:
            await self.load()
        except VoiceUnavailable as exc:
            log.warning("voice models not preloaded: %s", exc)

    async def transcribe(self, audio: bytes) -> Transcript:
        """Decode and transcribe; raises AudioError subclasses or VoiceUnavailable."""
        # Bad input is refused before it costs a model load.
        check_size(audio, self.limits)
        samples = await self._run(self._stt_pool, lambda: decode_audio(audio, self.limits))
        engine = await self._stt_engine()

        def work() -> Transcript:
            started = time.perf_counter()
            try:
                return engine.transcribe(samples)
            finally:
                self.stt_seconds += time.perf_counter() - started

        return await self._run(self._stt_pool, work)

    async def synthesize(self, text: str) -> SpeechAudio:
        """The whole text as one clip (empty when there is nothing to say)."""
        engine = await self._tts_engine()

        def work() -> SpeechAudio:
            started = time.perf_counter()
            try:
                pcm = b"".join(part.pcm for part in engine.sentences(text))
            finally:
                self.tts_seconds += time.perf_counter() - started
            return SpeechAudio(pcm, engine.sample_rate)

        return await self._run(self._tts_pool, work)

    async def stream(self, text: str) -> AsyncGenerator[SpeechAudio, None]:
        """One clip per sentence, each handed over as soon as Piper made it."""
        engine = await self._tts_engine()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[SpeechAudio | AgentGWError | _Done] = asyncio.Queue()
        stop = threading.Event()

        def put(item: SpeechAudio | AgentGWError | _Done) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:
                stop.set()  # the loop is closed: nobody is listening any more

        def work() -> None:
            started = time.perf_counter()
            try:
                for sentence in engine.sentences(text):
                    if stop.is_set():
                        return
                    put(sentence)
            except AgentGWError as exc:  # handed to the consumer, who raises it
                put(exc)
            finally:
                self.tts_seconds += time.perf_counter() - started
                put(_DONE)

        if self._closed:
            raise VoiceUnavailable("the voice service is shut down")
        worker = loop.run_in_executor(self._tts_pool, work)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, _Done):
                    break
                if isinstance(item, AgentGWError):
                    raise item
                yield item
        finally:
            # A consumer that stops early (client gone) stops Piper at the next sentence.
            stop.set()
            await asyncio.shield(worker)

    async def encode(self, audio: SpeechAudio, fmt: AudioFormat) -> bytes:
        """WAV or OGG/Opus bytes, made in the TTS worker thread."""
        encoder: Callable[[SpeechAudio], bytes] = encode_ogg_opus if fmt == "ogg" else encode_wav
        try:
            return await self._run(self._tts_pool, lambda: encoder(audio))
        except (RuntimeError, ValueError) as exc:
            raise VoiceUnavailable(f"could not encode the reply audio as {fmt}: {exc}") from exc

    async def aclose(self) -> None:
        """Wait for work in flight, then drop the models and stop the threads."""
        if self._closed:
            return
        self._closed = True
        for pool in (self._stt_pool, self._tts_pool):
            await asyncio.to_thread(pool.shutdown, wait=True)
        for engine in (self._stt, self._tts):
            if engine is not None:
                engine.close()
        self._stt = self._tts = None

    async def _run(self, pool: ThreadPoolExecutor, work: Callable[[], T]) -> T:
        if self._closed:
            raise VoiceUnavailable("the voice service is shut down")
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, work)
        except RuntimeError as exc:
            if self._closed:  # the pool was shut down while we were queued
                raise VoiceUnavailable("the voice service is shut down") from exc
            raise

    async def _stt_engine(self) -> WhisperEngine:
        if self._stt is not None:
            return self._stt
        async with self._stt_lock:
            if self._stt is None:
                config = self.config

                def load() -> WhisperEngine:
                    engine = WhisperEngine(
                        config.stt_model,
                        whisper_model_dir(config.stt_model, self.cache_dir),
                        compute_type=config.compute_type,
                        threads=config.threads,
                        beam_size=config.beam_size,
                        language=config.language,
                        vad=config.vad,
                    )
                    engine.load()
                    return engine

                self._stt = await self._run(self._stt_pool, load)
            return self._stt

    async def _tts_engine(self) -> PiperEngine:
        if self._tts is not None:
            return self._tts
        async with self._tts_lock:
            if self._tts is None:
                config = self.config

                def load() -> PiperEngine:
                    model_path, config_path = piper_voice_paths()
                    engine = PiperEngine(
                        model_path,
                        config_path,
                        threads=config.threads,
                        length_scale=config.length_scale,
                    )
                    engine.load()
                    return engine

                self._tts = await self._run(self._tts_pool, load)
            return self._tts
