"""Audio in and out with PyAV: decode anything common, encode WAV and OGG/Opus.

Everything here is blocking (it is CPU work on whole clips); callers run it in
a worker thread. PyAV errors are mapped to ours at this edge.
"""

from __future__ import annotations

import io
import math
import wave
from collections.abc import Iterable
from dataclasses import dataclass

import av
import av.error
import numpy as np
import numpy.typing as npt

from gateway.errors import AudioTooLarge, AudioTooLong, SilentAudio, UndecodableAudio
from voice.base import SpeechAudio

# Whisper's input: 16 kHz mono float32 in [-1, 1].
STT_SAMPLE_RATE = 16_000
# Opus only runs at 8/12/16/24/48 kHz; Telegram voice notes are 48 kHz.
OPUS_SAMPLE_RATE = 48_000

Samples = npt.NDArray[np.float32]


@dataclass(frozen=True)
class AudioLimits:
    """What we accept from a client before any model sees it."""

    max_bytes: int
    max_seconds: float
    # Clips whose loudest sample is below this level (dBFS) are silence.
    silence_dbfs: float


def check_size(data: bytes, limits: AudioLimits) -> None:
    if len(data) > limits.max_bytes:
        raise AudioTooLarge(f"audio is {len(data)} bytes; the limit is {limits.max_bytes}")
    if not data:
        raise UndecodableAudio("the audio is empty")


def decode_audio(data: bytes, limits: AudioLimits, rate: int = STT_SAMPLE_RATE) -> Samples:
    """Any format PyAV reads (OGG/Opus, WAV, MP3, WebM, …) as mono float32 at ``rate``.

    Stops decoding as soon as the clip runs past ``limits.max_seconds``.
    Raises ``AudioTooLarge``, ``AudioTooLong``, ``UndecodableAudio`` or
    ``SilentAudio``.
    """
    check_size(data, limits)
    max_samples = math.ceil(limits.max_seconds * rate)
    pieces: list[Samples] = []
    count = 0
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise UndecodableAudio("the file has no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    piece = out.to_ndarray().reshape(-1).astype(np.float32, copy=False)
                    pieces.append(piece)
                    count += piece.size
                if count > max_samples:
                    raise AudioTooLong(
                        f"audio is longer than the limit of {limits.max_seconds:g} s"
                    )
            for out in resampler.resample(None):
                piece = out.to_ndarray().reshape(-1).astype(np.float32, copy=False)
                pieces.append(piece)
                count += piece.size
    except av.error.FFmpegError as exc:
        raise UndecodableAudio(f"cannot decode the audio: {exc}") from exc
    except (ValueError, EOFError) as exc:
        # PyAV raises plain ValueError for some truncated or unprobeable input.
        raise UndecodableAudio(f"cannot decode the audio: {exc}") from exc
    if count > max_samples:
        raise AudioTooLong(f"audio is longer than the limit of {limits.max_seconds:g} s")
    samples = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    if peak_dbfs(samples) < limits.silence_dbfs:
        raise SilentAudio("the audio is silent")
    return samples


def peak_dbfs(samples: Samples) -> float:
    """The loudest sample in dB relative to full scale; -inf for silence or no samples."""
    if samples.size == 0:
        return -math.inf
    peak = float(np.max(np.abs(samples)))
    return 20.0 * math.log10(peak) if peak > 0.0 else -math.inf


def join_speech(parts: Iterable[SpeechAudio], sample_rate: int) -> SpeechAudio:
    """Sentences one after another as one clip (all at ``sample_rate``)."""
    chunks = []
    for part in parts:
        if part.sample_rate != sample_rate:
            raise ValueError(f"cannot join {part.sample_rate} Hz audio into {sample_rate} Hz")
        chunks.append(part.pcm)
    return SpeechAudio(b"".join(chunks), sample_rate)


def encode_wav(audio: SpeechAudio) -> bytes:
    """16-bit mono PCM WAV, at the audio's own rate."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(audio.sample_rate)
        out.writeframes(audio.pcm)
    return buffer.getvalue()


def encode_ogg_opus(audio: SpeechAudio, bitrate: int = 32_000) -> bytes:
    """Mono Opus at 48 kHz in an OGG container: what Telegram plays as a voice note."""
    if not audio.pcm:
        raise ValueError("no audio to encode")
    pcm = np.frombuffer(audio.pcm, dtype="<i2").reshape(1, -1)
    buffer = io.BytesIO()
    try:
        with av.open(buffer, mode="w", format="ogg") as container:
            stream = container.add_stream("libopus", rate=OPUS_SAMPLE_RATE)
            stream.layout = "mono"
            stream.bit_rate = bitrate
            # Opus wants fixed 20 ms frames at 48 kHz; the resampler cuts them.
            resampler = av.AudioResampler(
                format="s16", layout="mono", rate=OPUS_SAMPLE_RATE, frame_size=960
            )
            frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
            frame.sample_rate = audio.sample_rate
            for piece in [*resampler.resample(frame), *resampler.resample(None)]:
                container.mux(stream.encode(piece))
            container.mux(stream.encode(None))
    except av.error.FFmpegError as exc:
        raise RuntimeError(f"OGG/Opus encoding failed: {exc}") from exc
    return buffer.getvalue()
