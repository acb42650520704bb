"""/api/voice refusals that need no model: bad audio, limits, voice off, bad names.

Bad input is refused before any model loads, so these run fast; the full
spoken turn with real models is in test_voice_models.py.
"""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import FormData

from gateway.brains.scripted import ScriptedBrain
from gateway.config import VoiceConfig
from gateway.errors import AudioTooLarge, AudioTooLong, UndecodableAudio
from tests.conftest import RunningGateway, make_config, start_gateway
from tests.test_voice_audio import encode_as, tone
from voice.service import VoiceService
from web.voice_api import VOICE_ENDPOINT

SESSION = "voice-session-1"


def audio_form(data: bytes, filename: str = "clip.wav", mime: str = "audio/wav") -> FormData:
    """A multipart form with the audio in its ``audio`` field, as a browser sends it."""
    form = FormData()
    form.add_field("audio", io.BytesIO(data), filename=filename, content_type=mime)
    return form


async def test_garbage_gets_400_and_the_server_keeps_serving(running: RunningGateway) -> None:
    for _ in range(2):
        async with running.session.post(
            running.url(f"/api/voice?session={SESSION}"),
            data=os.urandom(3000),
            headers={"Content-Type": "audio/ogg"},
        ) as response:
            assert response.status == 400
            body = await response.json()
        assert body["error"]["code"] == "undecodable_audio"
        async with running.session.get(running.url("/healthz")) as health:
            assert health.status == 200
    voice = running.app[VOICE_ENDPOINT].voice
    assert voice is not None
    assert not voice.loaded  # refused before any model was loaded
    assert running.gateway.router.turns_in_flight == 0


async def test_silence_gets_400_silent_audio(running: RunningGateway) -> None:
    silence = encode_as(tone(1.0, amplitude=0.0), 16_000, "wav")
    async with running.session.post(
        running.url("/api/voice"), data=silence, headers={"Content-Type": "audio/wav"}
    ) as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "silent_audio"


async def test_missing_field_empty_body_and_bad_options(running: RunningGateway) -> None:
    form = FormData()
    form.add_field("other", io.BytesIO(b"RIFF"), filename="x.wav")
    async with running.session.post(running.url("/api/voice"), data=form) as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "no_audio"
    async with running.session.post(
        running.url("/api/voice"),
        data=b"no boundary here",
        headers={"Content-Type": "multipart/form-data; boundary=zz"},
    ) as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "bad_upload"
    async with running.session.post(
        running.url("/api/voice"), data=b"", headers={"Content-Type": "audio/ogg"}
    ) as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "no_audio"
    for query, code in (("session=short", "bad_session"), ("format=flac", "bad_format")):
        async with running.session.post(
            running.url(f"/api/voice?{query}"), data=b"x", headers={"Content-Type": "audio/ogg"}
        ) as response:
            assert response.status == 400
            assert (await response.json())["error"]["code"] == code


async def test_oversized_upload_gets_413(tmp_path: Path, brain: ScriptedBrain) -> None:
    config = make_config(tmp_path, voice={"max_bytes": 2000})
    server, session = await start_gateway(config, brain)
    try:
        running = RunningGateway(server, session)
        big = encode_as(tone(2.0), 16_000, "wav")
        async with session.post(
            running.url("/api/voice"), data=big, headers={"Content-Type": "audio/wav"}
        ) as response:
            assert response.status == 413
            assert (await response.json())["error"]["code"] == "audio_too_large"
        # The same file as a multipart field.
        async with session.post(running.url("/api/voice"), data=audio_form(big)) as response:
            assert response.status == 413

        # Chunked, with no Content-Length: refused while reading.
        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(big), 1000):
                yield big[start : start + 1000]

        async with session.post(
            running.url("/api/voice"), data=chunks(), headers={"Content-Type": "audio/wav"}
        ) as response:
            assert response.status == 413
            assert (await response.json())["error"]["code"] == "audio_too_large"
    finally:
        await session.close()
        await server.close()


async def test_voice_disabled_gets_503(tmp_path: Path, brain: ScriptedBrain) -> None:
    config = make_config(tmp_path, voice={"enabled": False})
    server, session = await start_gateway(config, brain)
    try:
        running = RunningGateway(server, session)
        assert running.gateway.voice is None
        async with session.post(
            running.url("/api/voice"),
            data=encode_as(tone(1.0), 16_000, "wav"),
            headers={"Content-Type": "audio/wav"},
        ) as response:
            assert response.status == 503
            assert (await response.json())["error"]["code"] == "voice_disabled"
    finally:
        await session.close()
        await server.close()


async def test_audio_names_are_validated(running: RunningGateway) -> None:
    for name in ("..%2Fagentgw.db", "0" * 32 + ".ogg", "abc.wav", "%2e%2e"):
        async with running.session.get(running.url(f"/api/voice/audio/{name}")) as response:
            assert response.status == 404


async def test_service_limits_apply_before_any_model(tmp_path: Path) -> None:
    service = VoiceService(VoiceConfig(max_seconds=1.0, max_bytes=50_000), tmp_path)
    try:
        with pytest.raises(AudioTooLong):
            await service.transcribe(encode_as(tone(2.0), 16_000, "ogg"))
        with pytest.raises(AudioTooLarge):
            await service.transcribe(encode_as(tone(1.0), 16_000, "wav") * 4)
        with pytest.raises(UndecodableAudio):
            await service.transcribe(b"\x00" * 100)
        assert not service.loaded
    finally:
        await service.aclose()
