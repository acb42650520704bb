"""/metrics counts the seconds the speech models worked (real Whisper and Piper)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import RunningGateway, espeak_wav
from tests.test_metrics import scrape, value


async def test_voice_model_seconds_are_counted(running: RunningGateway, tmp_path: Path) -> None:
    voice = running.gateway.voice
    assert voice is not None
    before = await scrape(running.session, running.url("/metrics"))
    assert value(before, "agentgw_voice_stt_seconds_total") == 0
    assert value(before, "agentgw_voice_tts_seconds_total") == 0
    await voice.transcribe(espeak_wav("The weather is nice today.", tmp_path).read_bytes())
    await voice.synthesize("Hello there.")
    after = await scrape(running.session, running.url("/metrics"))
    assert value(after, "agentgw_voice_stt_seconds_total") > 0
    assert value(after, "agentgw_voice_tts_seconds_total") > 0
