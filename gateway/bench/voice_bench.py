"""``agentgw bench voice``: speech-to-text and text-to-speech speed, and the spoken round trip.

The utterance is real speech made with espeak-ng (about 3 s). After one
warm-up of everything, it measures, as medians over ``--runs``:

- ``stt_rtf``: transcription time (decode included) / utterance length;
- ``tts_rtf``: synthesis time of a two-sentence reply / its audio length;
- ``round_trip_s``: the user's whole utterance in hand → first byte of reply
  audio, through the real HTTP path a push-to-talk page uses: ``POST
  /api/voice?stream=1`` to the gateway on loopback (decode, Whisper, a real
  turn through router, pipeline and store with the scripted brain, Piper on
  the first sentence, OGG/Opus encoding, file written), then ``GET`` of the
  first sentence's audio URL until its first byte arrives.
  ``round_trip_plain_s`` is the same without streaming (the whole reply is
  spoken and encoded before the JSON answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gateway.app import create_app
from gateway.bench.report import at_most, print_verdicts
from gateway.brains.base import BrainRequest
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config, load_config
from gateway.errors import ConfigError
from gateway.runtime import GATEWAY
from voice.audio import AudioLimits, decode_audio
from voice.service import VoiceService

UTTERANCE = "Please remember that my favourite colour is green, thank you."
REPLY_TAIL = " I will keep that in mind for next time."
TTS_TEXT = "Your favourite colour is green. I will keep that in mind for next time."
TARGET_ROUND_TRIP_S = 1.0


def make_utterance(folder: Path) -> bytes:
    """Speech made by espeak-ng, as a client would upload it (22 kHz WAV)."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise ConfigError("bench voice needs espeak-ng: apt-get install -y espeak-ng")
    path = folder / "utterance.wav"
    subprocess.run([espeak, "-w", str(path), UTTERANCE], check=True, timeout=60)
    return path.read_bytes()


def reply_for(request: BrainRequest) -> str:
    heard = request.messages[-1].text if request.messages else ""
    return f"You said: {heard}{REPLY_TAIL}"


class ScriptedReplies(ScriptedBrain):
    """The scripted brain, answering every turn with two sentences."""

    def _next_reply(self, request: BrainRequest) -> str:
        return reply_for(request)


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await call()
    return time.perf_counter() - start, result


async def streamed_round_trip(
    session: aiohttp.ClientSession, base: str, audio: bytes, n: int
) -> dict[str, float]:
    """Seconds from sending the utterance to the first byte of reply audio (and stages)."""
    marks: dict[str, float] = {}
    start = time.perf_counter()
    async with session.post(
        f"{base}/api/voice?session=bench-voice-{n:04d}&stream=1",
        data=audio,
        headers={"Content-Type": "audio/wav"},
    ) as response:
        if response.status != 200:
            raise RuntimeError(f"/api/voice answered {response.status}: {await response.text()}")
        url = ""
        async for raw in response.content:
            line = json.loads(raw)
            if line["type"] == "transcript" and "transcript_s" not in marks:
                marks["transcript_s"] = time.perf_counter() - start
            elif line["type"] == "audio" and not url:
                marks["first_audio_url_s"] = time.perf_counter() - start
                url = line["url"]
                async with session.get(base + url) as got:
                    await got.content.readany()
                    marks["round_trip_s"] = time.perf_counter() - start
            elif line["type"] == "error":
                raise RuntimeError(f"/api/voice failed: {line}")
        if not url:
            raise RuntimeError("/api/voice sent no audio")
    return marks


async def plain_round_trip(
    session: aiohttp.ClientSession, base: str, audio: bytes, n: int
) -> float:
    start = time.perf_counter()
    async with session.post(
        f"{base}/api/voice?session=bench-plain-{n:04d}",
        data=audio,
        headers={"Content-Type": "audio/wav"},
    ) as response:
        body = await response.json()
        if response.status != 200:
            raise RuntimeError(f"/api/voice answered {response.status}: {body}")
    async with session.get(base + body["audio_url"]) as got:
        await got.content.readany()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


async def run(config: Config, runs: int, audio: bytes) -> dict[str, Any]:
    app = create_app(config, brain=ScriptedReplies())
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        base = f"http://127.0.0.1:{port}"
        voice = app[GATEWAY].voice
        if voice is None:
            raise ConfigError("bench voice needs voice.enabled = true")
        return await measure(voice, base, runs, audio)
    finally:
        await runner.cleanup()


async def measure(voice: VoiceService, base: str, runs: int, audio: bytes) -> dict[str, Any]:
    limits = AudioLimits(max_bytes=len(audio), max_seconds=60.0, silence_dbfs=-90.0)
    utterance_s = (await asyncio.to_thread(decode_audio, audio, limits)).size / 16_000
    load_s, _ = await timed(voice.load)

    async with aiohttp.ClientSession() as session:
        # Warm-up: first calls pay for allocations and caches, not for speech.
        transcript = await voice.transcribe(audio)
        await voice.synthesize(TTS_TEXT)
        await streamed_round_trip(session, base, audio, 0)

        stt: list[float] = []
        tts: list[float] = []
        tts_first: list[float] = []
        tts_audio_s = 0.0
        trips: list[dict[str, float]] = []
        plain: list[float] = []
        for n in range(1, runs + 1):
            seconds, _ = await timed(lambda: voice.transcribe(audio))
            stt.append(seconds)
            seconds, speech = await timed(lambda: voice.synthesize(TTS_TEXT))
            tts.append(seconds)
            tts_audio_s = speech.duration_s
            start = time.perf_counter()
            stream = voice.stream(TTS_TEXT)
            await anext(stream)
            tts_first.append(time.perf_counter() - start)
            await stream.aclose()
            trips.append(await streamed_round_trip(session, base, audio, n))
            plain.append(await plain_round_trip(session, base, audio, n))

    round_trips = [t["round_trip_s"] for t in trips]
    return {
        "stt_model": voice.stt_name,
        "tts_voice": voice.tts_name,
        "compute_type": voice.config.compute_type,
        "stt_threads": voice.config.threads,
        "tts_threads": voice.config.threads,
        "beam_size": voice.config.beam_size,
        "vad": voice.config.vad,
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        "utterance_s": round(utterance_s, 3),
        "transcript": transcript.text,
        "models_load_s": round(load_s, 3),
        "stt_s": median(stt),
        "stt_rtf": round(statistics.median(stt) / utterance_s, 4),
        "tts_s": median(tts),
        "tts_audio_s": round(tts_audio_s, 3),
        "tts_rtf": round(statistics.median(tts) / tts_audio_s, 4),
        "tts_first_sentence_s": median(tts_first),
        "round_trip_s": median(round_trips),
        "round_trip_min_s": round(min(round_trips), 4),
        "round_trip_max_s": round(max(round_trips), 4),
        "round_trip_transcript_s": median([t["transcript_s"] for t in trips]),
        "round_trip_first_audio_url_s": median([t["first_audio_url_s"] for t in trips]),
        "round_trip_plain_s": median(plain),
        "round_trip_path": (
            "HTTP POST /api/voice?stream=1 on loopback (WAV upload, Whisper, gateway turn "
            "with the scripted brain, Piper first sentence, OGG/Opus) + GET of that audio "
            "to its first byte"
        ),
        "target_round_trip_s": TARGET_ROUND_TRIP_S,
    }


def bench_config(args: argparse.Namespace, data_dir: Path) -> Config:
    overrides: dict[str, dict[str, Any]] = {
        "store": {"data_dir": str(data_dir), "url": ""},
        "server": {"host": "127.0.0.1"},
        "voice": {"enabled": True, "reply_format": "ogg"},
    }
    if args.stt_model:
        overrides["voice"]["stt_model"] = args.stt_model
    if args.threads:
        overrides["voice"]["threads"] = args.threads
    if args.beam_size:
        overrides["voice"]["beam_size"] = args.beam_size
    return load_config(args.config, overrides=overrides)


def main(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise ConfigError("--runs must be 1 or more")
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-voice-") as folder:
        audio = make_utterance(Path(folder))
        config = bench_config(args, Path(folder) / "data")
        result = asyncio.run(run(config, args.runs, audio))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>30}: {value}")
    target = at_most("spoken round trip", result["round_trip_s"], TARGET_ROUND_TRIP_S, "s")
    print_verdicts([target], as_json_output=args.json)
    return 0
