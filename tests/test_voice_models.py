"""Real Whisper and Piper: speech made with espeak-ng, spoken turns over real HTTP.

The models are loaded once for the session. A loaded VoiceService holds no
event-loop state (its models live in worker threads), so each test's app
borrows it in place of the app's own, still unloaded, service.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import av
import pytest

from gateway.brains.scripted import ScriptedBrain
from gateway.config import VoiceConfig
from gateway.errors import BrainUnavailable, SilentAudio, VoiceUnavailable
from tests.conftest import RunningGateway, espeak_wav, make_config, start_gateway
from tests.test_voice_api import audio_form
from tests.test_voice_audio import encode_as, tone
from voice.audio import AudioLimits, decode_audio
from voice.base import Transcript
from voice.service import VoiceService
from voice.stt import WHISPER_BASE_SHA256, assemble_whisper_base
from web.voice_api import VOICE_ENDPOINT

pytestmark = pytest.mark.slow

SENTENCE = "Please remember that my favourite colour is green."
SESSION = "voice-models-session"
LIMITS = AudioLimits(max_bytes=10_000_000, max_seconds=60.0, silence_dbfs=-50.0)


def espeak(text: str, folder: Path) -> bytes:
    return espeak_wav(text, folder).read_bytes()


@pytest.fixture(scope="session")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return espeak(SENTENCE, tmp_path_factory.mktemp("espeak"))


@pytest.fixture(scope="session")
def voice_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VoiceService]:
    service = VoiceService(VoiceConfig(), tmp_path_factory.mktemp("models"))
    asyncio.run(service.load())
    yield service
    asyncio.run(service.aclose())


@pytest.fixture
def voiced(running: RunningGateway, voice_service: VoiceService) -> RunningGateway:
    running.app[VOICE_ENDPOINT].voice = voice_service
    return running


def lower(transcript: Transcript | str) -> str:
    return (transcript.text if isinstance(transcript, Transcript) else transcript).lower()


def as_format(wav: bytes, kind: str) -> bytes:
    """The espeak WAV re-encoded as ``kind`` (ogg, webm, mp3)."""
    return encode_as(decode_audio(wav, LIMITS), 16_000, kind)


# --- speech to text -------------------------------------------------------


async def test_espeak_speech_is_transcribed(voice_service: VoiceService, speech_wav: bytes) -> None:
    transcript = await voice_service.transcribe(speech_wav)
    assert "remember" in lower(transcript)
    assert "green" in lower(transcript)
    assert transcript.language == "en"
    assert 2.0 < transcript.duration_s < 4.0


@pytest.mark.parametrize("kind", ["ogg", "webm", "mp3"])
async def test_compressed_speech_is_transcribed(
    voice_service: VoiceService, speech_wav: bytes, kind: str
) -> None:
    transcript = await voice_service.transcribe(as_format(speech_wav, kind))
    assert "green" in lower(transcript)


async def test_loud_non_speech_is_silent(voice_service: VoiceService) -> None:
    # Loud enough to pass the level gate: only the VAD and Whisper can tell.
    with pytest.raises(SilentAudio):
        await voice_service.transcribe(encode_as(tone(2.0, amplitude=0.5), 16_000, "wav"))


async def test_whisper_base_is_joined_verified_and_multilingual(
    tmp_path: Path, speech_wav: bytes
) -> None:
    folder = assemble_whisper_base(tmp_path / "whisper-base")
    assert (folder / "model.bin.sha256").read_text().strip() == WHISPER_BASE_SHA256
    stat = (folder / "model.bin").stat()
    # A second call trusts the stamp and leaves the file alone.
    assert assemble_whisper_base(folder) == folder
    assert (folder / "model.bin").stat().st_mtime_ns == stat.st_mtime_ns

    service = VoiceService(VoiceConfig(stt_model="base"), tmp_path)
    try:
        transcript = await service.transcribe(speech_wav)
    finally:
        await service.aclose()
    assert "green" in lower(transcript)
    assert transcript.language == "en"  # detected, not configured


def test_whisper_base_with_a_wrong_hash_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("voice.stt.WHISPER_BASE_SHA256", "0" * 64)
    with pytest.raises(VoiceUnavailable, match="sha256"):
        assemble_whisper_base(tmp_path / "whisper-base")
    assert not (tmp_path / "whisper-base" / "model.bin").exists()
    assert list((tmp_path / "whisper-base").iterdir()) == []


# --- text to speech -------------------------------------------------------

REPLY = "Your favourite colour is green. I will remember that for next time."


async def test_tts_makes_plausible_speech_that_whisper_understands(
    voice_service: VoiceService,
) -> None:
    speech = await voice_service.synthesize(REPLY)
    assert speech.sample_rate == 22_050
    # Thirteen words: a few seconds, not a blip and not a minute.
    assert 2.5 < speech.duration_s < 9.0

    ogg = await voice_service.encode(speech, "ogg")
    with av.open(io.BytesIO(ogg)) as container:
        assert container.streams.audio[0].codec_context.name == "opus"
    assert abs(decode_audio(ogg, LIMITS).size / 16_000 - speech.duration_s) < 0.05

    heard = lower(await voice_service.transcribe(ogg))
    assert "green" in heard
    assert "remember" in heard


async def test_tts_streams_one_clip_per_sentence(voice_service: VoiceService) -> None:
    clips = [clip async for clip in voice_service.stream(REPLY)]
    assert len(clips) == 2
    assert all(clip.duration_s > 0.5 for clip in clips)
    # Nothing to say aloud: no clips, no error.
    assert [clip async for clip in voice_service.stream("```\ncode only\n```")] == []


async def test_tts_stream_stopped_early_stops_cleanly(voice_service: VoiceService) -> None:
    text = " ".join(f"This is sentence number {n}." for n in range(1, 9))
    stream = voice_service.stream(text)
    first = await anext(stream)
    await stream.aclose()  # what a vanished client causes
    assert first.duration_s > 0.5
    # The worker is free again: the next call works.
    assert (await voice_service.synthesize("Still here.")).duration_s > 0.3


# --- /api/voice end to end ---------------------------------------------------


async def test_spoken_turn_over_http(voiced: RunningGateway, speech_wav: bytes) -> None:
    async with voiced.session.post(
        voiced.url(f"/api/voice?session={SESSION}"),
        data=speech_wav,
        headers={"Content-Type": "audio/wav"},
    ) as response:
        assert response.status == 200
        body = await response.json()
    assert "green" in lower(body["transcript"])
    assert body["session"] == SESSION
    assert body["language"] == "en"
    assert body["reply_text"] == f"You said: {body['transcript']}"
    assert isinstance(body["message_id"], int)
    assert isinstance(body["reply_id"], int)
    assert body["audio_url"].startswith("/api/voice/audio/")
    assert body["audio_url"].endswith(".ogg")

    async with voiced.session.get(voiced.url(body["audio_url"])) as audio:
        assert audio.status == 200
        assert audio.headers["Content-Type"] == "audio/ogg"
        data = await audio.read()
    assert decode_audio(data, LIMITS).size > 16_000  # over a second of speech

    # The turn is stored in that webchat session's conversation, like a typed one.
    ws = await voiced.ws(SESSION)
    await ws.receive_json(timeout=5)
    history = await ws.receive_json(timeout=5)
    await ws.close()
    assert [(m["role"], m["text"]) for m in history["messages"]] == [
        ("user", body["transcript"]),
        ("assistant", body["reply_text"]),
    ]


async def test_streamed_spoken_turn_reaches_the_open_page(
    voiced: RunningGateway, speech_wav: bytes, brain: ScriptedBrain
) -> None:
    brain.script = ["Green is a lovely colour. I will remember it. Anything else?"]
    ws = await voiced.ws(SESSION)
    await ws.receive_json(timeout=5)  # hello
    await ws.receive_json(timeout=5)  # history

    async with voiced.session.post(
        voiced.url(f"/api/voice?session={SESSION}&stream=1&format=wav"),
        data=audio_form(as_format(speech_wav, "webm"), "clip.webm", "audio/webm"),
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/x-ndjson")
        lines = [json.loads(line) async for line in response.content if line.strip()]

    kinds = [line["type"] for line in lines]
    assert kinds[0] == "transcript"
    assert kinds[-1] == "done"
    assert "green" in lower(lines[0]["text"])
    reply = next(line for line in lines if line["type"] == "reply")
    assert "".join(line["text"] for line in lines if line["type"] == "delta") == reply["text"]
    audio = [line for line in lines if line["type"] == "audio"]
    assert [a["index"] for a in audio] == list(range(len(audio)))
    assert len(audio) == 3  # one per sentence
    assert lines[-1]["audio_urls"] == [a["url"] for a in audio]
    for clip in audio:
        async with voiced.session.get(voiced.url(clip["url"])) as got:
            assert got.status == 200
            assert got.headers["Content-Type"] == "audio/wav"
            assert (await got.read())[:4] == b"RIFF"

    # The page on the same session saw the spoken message and the reply.
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != "reply":
        frames.append(await ws.receive_json(timeout=10))
    await ws.close()
    said = next(f for f in frames if f["type"] == "message")
    assert said["text"] == lines[0]["text"]
    assert said["message_id"] == lines[0]["message_id"]
    assert frames[-1]["text"] == reply["text"]


async def test_brain_failure_gets_502_with_the_turn_code(
    voiced: RunningGateway, speech_wav: bytes, brain: ScriptedBrain
) -> None:
    brain.script = [BrainUnavailable("the model server is down")]
    async with voiced.session.post(
        voiced.url(f"/api/voice?session={SESSION}"), data=audio_form(speech_wav)
    ) as response:
        assert response.status == 502
        body = await response.json()
    assert body["error"]["code"] == "brain_unavailable"
    assert "green" in lower(body["transcript"])
    assert isinstance(body["message_id"], int)

    brain.script = [BrainUnavailable("still down")]
    async with voiced.session.post(
        voiced.url(f"/api/voice?session={SESSION}&stream=1"), data=audio_form(speech_wav)
    ) as response:
        assert response.status == 200  # the stream had begun: the error is its last line
        lines = [json.loads(line) async for line in response.content if line.strip()]
    assert lines[0]["type"] == "transcript"
    assert lines[-1] == {
        "type": "error",
        "code": "brain_unavailable",
        "message": lines[-1]["message"],
        "status": 502,
    }


async def test_loop_serves_while_a_transcription_runs(
    voiced: RunningGateway, voice_service: VoiceService, speech_wav: bytes
) -> None:
    """Hold Whisper inside its worker thread; /healthz must still answer meanwhile."""
    engine = voice_service._stt
    assert engine is not None
    real = engine.transcribe
    inside = threading.Event()
    release = threading.Event()

    def held(samples: Any) -> Transcript:
        inside.set()
        release.wait(30)
        return real(samples)

    engine.transcribe = held  # type: ignore[method-assign]
    try:
        post = asyncio.create_task(
            voiced.session.post(
                voiced.url(f"/api/voice?session={SESSION}"),
                data=speech_wav,
                headers={"Content-Type": "audio/wav"},
            )
        )
        assert await asyncio.to_thread(inside.wait, 30)
        async with voiced.session.get(voiced.url("/healthz")) as health:
            assert health.status == 200
        assert not post.done()  # the transcription is still held
        release.set()
        response: aiohttp.ClientResponse = await post
        async with response:
            assert response.status == 200
            assert "green" in lower((await response.json())["transcript"])
    finally:
        release.set()
        engine.transcribe = real  # type: ignore[method-assign]


async def test_preload_loads_in_the_background_and_closes(
    tmp_path: Path, brain: ScriptedBrain
) -> None:
    config = make_config(tmp_path, voice={"preload": True})
    server, session = await start_gateway(config, brain)
    try:
        running = RunningGateway(server, session)
        voice = running.gateway.voice
        assert voice is not None
        async with session.get(running.url("/healthz")) as health:
            assert health.status == 200
        for _ in range(600):  # the models load in their worker threads
            if voice.loaded:
                break
            await asyncio.sleep(0.05)
        assert voice.loaded
    finally:
        await session.close()
        await server.close()
    assert not voice.loaded  # closed with the app
    with pytest.raises(VoiceUnavailable, match="shut down"):
        await voice.synthesize("Too late.")
