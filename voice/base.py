"""The contracts of the voice parts: speech to text, text to speech.

Both engines are blocking libraries (faster-whisper, piper); implementations
run them in worker threads and expose these async methods, so callers on the
event loop never block.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Transcript:
    """What was said: the text, the detected language, and the audio's length."""

    text: str
    language: str
    duration_s: float


@dataclass(frozen=True)
class SpeechAudio:
    """Synthesised speech: 16-bit mono PCM at ``sample_rate``."""

    pcm: bytes
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


class SpeechToText(Protocol):
    async def transcribe(self, audio: bytes) -> Transcript:
        """Decode any common audio format and transcribe it.

        Raises ``gateway.errors.AudioError`` subclasses for undecodable, too
        long, too large or silent audio.
        """
        ...


class TextToSpeech(Protocol):
    async def synthesize(self, text: str) -> SpeechAudio:
        """The whole text as speech."""
        ...

    def stream(self, text: str) -> AsyncIterator[SpeechAudio]:
        """Speech sentence by sentence, the first as soon as it is ready."""
        ...
