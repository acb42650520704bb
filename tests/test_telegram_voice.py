"""A real voice note on Telegram: espeak-ng speech, OGG/Opus, Whisper, a turn,
Piper, and a voice note back — through the real python-telegram-bot and the
gateway's own voice service."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import av
import numpy as np
import pytest

from gateway.brains.scripted import ScriptedBrain
from gateway.testing.fake_telegram import FakeTelegram
from tests.conftest import espeak_wav
from tests.test_telegram import ALICE, gateway, telegram_of, tg_config

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def ogg_opus(pcm: np.ndarray, rate: int) -> bytes:
    """Mono 16-bit PCM as a Telegram voice note (OGG/Opus, 48 kHz), with PyAV."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="ogg") as container:
        stream = container.add_stream("libopus", rate=48_000)
        stream.layout = "mono"
        resampler = av.AudioResampler(format="s16", layout="mono", rate=48_000, frame_size=960)
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = rate
        for piece in [*resampler.resample(frame), *resampler.resample(None)]:
            container.mux(stream.encode(piece))
        container.mux(stream.encode(None))
    return buffer.getvalue()


def speech_note(text: str, folder: Path) -> bytes:
    with wave.open(str(espeak_wav(text, folder)), "rb") as wav:
        rate = wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    return ogg_opus(pcm, rate)


def duration_s(ogg: bytes) -> float:
    with av.open(io.BytesIO(ogg)) as container:
        samples = sum(frame.samples for frame in container.decode(audio=0))
    return samples / 48_000


async def test_voice_note_in_text_and_voice_out(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    note = await asyncio.to_thread(speech_note, "What is the weather like today?", tmp_path)
    silence = await asyncio.to_thread(ogg_opus, np.zeros(48_000, dtype="<i2"), 48_000)
    async with gateway(tg_config(tmp_path, fake, {"voice": {"enabled": True}}), brain) as running:
        assert await telegram_of(running).wait_ready(10)
        fake.push(fake.voice_update(ALICE, note))
        await fake.wait_for(lambda: fake.calls_to("sendVoice", ok_only=True), timeout=120)

        heard = brain.requests[-1].messages[-1].text
        assert "weather" in heard.lower()
        assert fake.sent_texts(ALICE) == [f"You said: {heard}"]
        assert fake.calls_to("getFile", ok_only=True)
        (voice_call,) = fake.calls_to("sendVoice", ok_only=True)
        assert voice_call.params["chat_id"] == ALICE
        reply_audio = voice_call.files["voice"]
        assert reply_audio.startswith(b"OggS")
        assert b"OpusHead" in reply_audio[:200]
        assert await asyncio.to_thread(duration_s, reply_audio) > 1.0
        # The text goes out first, the voice note after it.
        assert fake.calls_to("sendMessage", ok_only=True)[0].at < voice_call.at

        # Bad audio gets a polite message with the code, and no turn.
        turns = len(brain.requests)
        fake.push(fake.voice_update(ALICE, b"OggS this is not audio at all"))
        await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= 2, timeout=60)
        assert (
            fake.sent_texts(ALICE)[1] == "Sorry — I couldn't play that audio. (undecodable_audio)"
        )
        fake.push(fake.voice_update(ALICE, silence))
        await fake.wait_for(lambda: len(fake.sent_texts(ALICE)) >= 3, timeout=60)
        assert fake.sent_texts(ALICE)[2].endswith("(silent_audio)")
        assert len(brain.requests) == turns
        assert len(fake.calls_to("sendVoice")) == 1


async def test_voice_replies_can_be_turned_off(
    tmp_path: Path, fake: FakeTelegram, brain: ScriptedBrain
) -> None:
    note = await asyncio.to_thread(speech_note, "Good morning to you.", tmp_path)
    config = tg_config(
        tmp_path, fake, {"voice": {"enabled": True}, "telegram": {"send_voice_replies": False}}
    )
    async with gateway(config, brain) as running:
        assert await telegram_of(running).wait_ready(10)
        fake.push(fake.voice_update(ALICE, note))
        await fake.wait_for(lambda: fake.sent_texts(ALICE), timeout=120)
        assert "morning" in fake.sent_texts(ALICE)[0].lower()
        await asyncio.sleep(0.3)
        assert not fake.calls_to("sendVoice")
