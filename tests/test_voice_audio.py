"""Audio decoding, limits, encoders, text preparation and the reply-audio folder (no models)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import pytest

from gateway.errors import AudioTooLarge, AudioTooLong, SilentAudio, UndecodableAudio
from voice.audio import (
    AudioLimits,
    decode_audio,
    encode_ogg_opus,
    encode_wav,
    join_speech,
    peak_dbfs,
)
from voice.base import SpeechAudio
from voice.files import AudioFiles
from voice.tts import SentenceSplitter, speakable

LIMITS = AudioLimits(max_bytes=10_000_000, max_seconds=60.0, silence_dbfs=-50.0)

# (container, codec, sample rate, frame size the codec needs)
FORMATS = {
    "wav": ("wav", "pcm_s16le", 16_000, None),
    "ogg": ("ogg", "libopus", 48_000, 960),
    "webm": ("webm", "libopus", 48_000, 960),
    "mp3": ("mp3", "libmp3lame", 44_100, 1152),
}


def tone(seconds: float, rate: int = 16_000, amplitude: float = 0.5) -> npt.NDArray[np.float32]:
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)


def encode_as(samples: npt.NDArray[np.float32], rate: int, kind: str) -> bytes:
    """Mono float samples as a file of ``kind`` (wav, ogg, webm, mp3), made with PyAV."""
    container_format, codec, out_rate, frame_size = FORMATS[kind]
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container_format) as container:
        stream = container.add_stream(codec, rate=out_rate)
        stream.layout = "mono"
        sample_format = stream.codec_context.codec.audio_formats[0].name
        resampler = av.AudioResampler(
            format=sample_format, layout="mono", rate=out_rate, frame_size=frame_size
        )
        pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = rate
        for piece in [*resampler.resample(frame), *resampler.resample(None)]:
            container.mux(stream.encode(piece))
        container.mux(stream.encode(None))
    return buffer.getvalue()


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_common_formats_decode_to_16k_mono(kind: str) -> None:
    data = encode_as(tone(2.0, rate=22_050), 22_050, kind)
    samples = decode_audio(data, LIMITS)
    assert samples.dtype == np.float32
    assert samples.ndim == 1
    assert abs(samples.size / 16_000 - 2.0) < 0.1
    assert -9.0 < peak_dbfs(samples) <= 0.5  # the tone is at -6 dBFS


@pytest.mark.parametrize(
    "data",
    [os.urandom(4000), b"this is not audio at all " * 50, b"RIFF\x00\x00\x00\x00WAVE"],
    ids=["random", "text", "truncated-wav"],
)
def test_garbage_is_undecodable(data: bytes) -> None:
    with pytest.raises(UndecodableAudio):
        decode_audio(data, LIMITS)


def test_empty_is_undecodable() -> None:
    with pytest.raises(UndecodableAudio):
        decode_audio(b"", LIMITS)


def test_silence_and_near_silence_are_silent() -> None:
    with pytest.raises(SilentAudio):
        decode_audio(encode_as(np.zeros(16_000, dtype=np.float32), 16_000, "wav"), LIMITS)
    hiss = tone(1.0, amplitude=0.001)  # -60 dBFS, under the -50 dBFS threshold
    with pytest.raises(SilentAudio):
        decode_audio(encode_as(hiss, 16_000, "wav"), LIMITS)


def test_too_long_and_too_large() -> None:
    data = encode_as(tone(3.0), 16_000, "ogg")
    with pytest.raises(AudioTooLong):
        decode_audio(data, AudioLimits(max_bytes=10_000_000, max_seconds=1.0, silence_dbfs=-50))
    with pytest.raises(AudioTooLarge):
        decode_audio(data, AudioLimits(max_bytes=len(data) - 1, max_seconds=60, silence_dbfs=-50))
    # Exactly at the limits is fine.
    decoded = decode_audio(
        data, AudioLimits(max_bytes=len(data), max_seconds=3.0, silence_dbfs=-50)
    )
    assert decoded.size > 0


def test_ogg_opus_encoder_round_trips() -> None:
    pcm = (tone(1.5, rate=22_050) * 32767).astype("<i2").tobytes()
    speech = SpeechAudio(pcm, 22_050)
    data = encode_ogg_opus(speech)
    assert data[:4] == b"OggS"
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.name == "opus"
        assert stream.codec_context.sample_rate == 48_000
        assert stream.codec_context.channels == 1
    decoded = decode_audio(data, LIMITS)
    assert abs(decoded.size / 16_000 - speech.duration_s) < 0.05


def test_wav_encoder_round_trips() -> None:
    pcm = (tone(0.5) * 32767).astype("<i2").tobytes()
    data = encode_wav(SpeechAudio(pcm, 16_000))
    assert data[:4] == b"RIFF"
    assert decode_audio(data, LIMITS).size == 8000


def test_join_speech_keeps_order_and_refuses_mixed_rates() -> None:
    joined = join_speech(
        [SpeechAudio(b"\x01\x00", 16_000), SpeechAudio(b"\x02\x00", 16_000)], 16_000
    )
    assert joined.pcm == b"\x01\x00\x02\x00"
    with pytest.raises(ValueError, match="cannot join"):
        join_speech([SpeechAudio(b"\x01\x00", 22_050)], 16_000)


def test_sentence_splitter_cuts_streamed_text() -> None:
    splitter = SentenceSplitter()
    got: list[str] = []
    for piece in ["Hello there, fri", "end. How are", " you today? I am", " fine", "."]:
        got += splitter.feed(piece)
    assert got == ["Hello there, friend.", "How are you today?"]
    assert splitter.flush() == ["I am fine."]
    assert splitter.flush() == []


def test_sentence_splitter_merges_tiny_sentences() -> None:
    splitter = SentenceSplitter(min_chars=12)
    assert splitter.feed("Hi. Yes. This is long enough. ") == ["Hi. Yes. This is long enough."]


def test_speakable_drops_markdown() -> None:
    text = "**Sure!** See [the docs](https://example.org/x).\n```py\nprint(1)\n```\nDone."
    spoken = speakable(text)
    assert "*" not in spoken
    assert "print" not in spoken
    assert "example.org" not in spoken
    assert "the docs" in spoken
    assert spoken.endswith("Done.")


def test_audio_files_save_serve_and_prune(tmp_path: Path) -> None:
    files = AudioFiles(tmp_path / "audio", retention_s=60.0)
    name = files.save(b"OggS-data", "ogg")
    assert len(name) == 36
    assert name.endswith(".ogg")
    path = files.path_of(name)
    assert path is not None
    assert path.read_bytes() == b"OggS-data"
    for bad in ("../agentgw.db", name.upper(), name[:-4] + ".mp3", "x" * 32 + ".ogg", ""):
        assert files.path_of(bad) is None
    old = time.time() - 120
    os.utime(path, (old, old))
    fresh = files.save(b"RIFF", "wav")
    assert files.prune() == 1
    assert files.path_of(name) is None
    assert files.path_of(fresh) is not None
