"""``agentgw bench continuity``: a scripted person over two sessions on two linked
webchat identities (so two conversations), through a real app on loopback, the
real router, pipeline, stages and store, and the scripted brain.

Session 1 sets a focus, logs decisions, asks an open question and states a plan,
then closes its page: the session's end writes the handoff note (the scripted
brain is the utility model; asked for a note it answers with the extractive note
of the person's lines, as no model can be downloaded here). Session 2 runs 50
turns, with a focus change and one more decision in the middle.

Keys: ``handoff_present`` (session 2's first prompt has the note, in the cached
prefix), ``decisions_recalled`` (the fraction of session 1's decisions in session
2's first cached prefix), ``prefix_cache_hit_ratio`` (over session 2's 50 turns:
the prompt tokens in a cached prefix identical to the previous turn's — what a
provider's prompt cache would hit — over all prompt tokens; the prefix is the
system blocks up to the one marked ``SystemBlock(cache=True)``),
``prefix_tokens`` (p50/max), ``tool_roundtrip_ms`` (memory_search through the
model's tool path, p50/p95 over 50 calls on a 300-item store:
gateway/bench/tools_bench.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gateway.bench.tools_bench import tool_roundtrip_ms
from gateway.brains.base import BrainRequest, Purpose
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config, load_config
from gateway.tokens import estimate_tokens

SESSION_ONE = "continuity-bench-1"
SESSION_TWO = "continuity-bench-2"
OPEN_QUESTION = "Should my long runs be on Saturday or on Sunday?"
SESSION_ONE_LINES = (
    "Hi! Let's focus on my Berlin marathon training plan.",
    "We decided to run four days a week.",
    "How many kilometres should an easy run be?",
    "Let's go with the Asics Novablast shoes.",
    "Decision: no races before the marathon.",
    OPEN_QUESTION,
    "I'll buy energy gels tomorrow.",
)
TURNS = 50


def bench_config(data_dir: Path) -> Config:
    empty = data_dir / "agentgw.toml"
    empty.touch()
    return load_config(
        empty,
        env={},
        overrides={
            "store": {"data_dir": str(data_dir / "data")},
            "memory": {"embedder": "none"},
            "agent": {"timezone": "UTC"},
            "observe": {"observer": "rules"},
            # 57 messages in a few seconds: the per-page limit would refuse some.
            "webchat": {"rate_per_minute": 10_000},
            "upkeep_jobs": {"session_idle_s": 0.0, "session_close_s": 0.0},
            "links": {"people": [f"webchat:{SESSION_ONE} webchat:{SESSION_TWO}"]},
        },
    )


def reply(request: BrainRequest) -> str:
    """The scripted brain: a short answer to a turn; to the handoff's utility call, the
    extractive note of the person's lines in the transcript."""
    from memory.continuity.handoff import HANDOFF_INSTRUCTIONS, extractive_note

    if request.purpose is Purpose.UTILITY and HANDOFF_INSTRUCTIONS in request.system_text():
        from datetime import datetime

        said = []
        for line in request.messages[-1].text.splitlines():
            found = re.match(r"^\[(\d{4}-\d\d-\d\d)\] user: (.*)$", line)
            if found:
                said.append((found.group(2), datetime.fromisoformat(found.group(1))))
        return extractive_note(said)
    return "Noted."


def split(request: BrainRequest) -> tuple[str, int, int]:
    """The cached prefix's text, its tokens, and the whole prompt's tokens."""
    marked = max((i for i, b in enumerate(request.system) if b.cache), default=-1)
    prefix = "\n\n".join(b.text for b in request.system[: marked + 1])
    rest = [b.text for b in request.system[marked + 1 :]] + [m.text for m in request.messages]
    cached = estimate_tokens(prefix) if prefix else 0
    return prefix, cached, cached + sum(estimate_tokens(t) for t in rest)


async def _say(ws: aiohttp.ClientWebSocketResponse, text: str, client_id: str) -> None:
    await ws.send_json({"type": "message", "text": text, "client_id": client_id})
    while True:
        frame = await ws.receive_json(timeout=60)
        if frame["type"] in ("reply", "error"):
            return


async def _session(
    client: aiohttp.ClientSession, base: str, name: str
) -> aiohttp.ClientWebSocketResponse:
    ws = await client.ws_connect(f"{base}/ws?session={name}&after=0")
    await ws.receive_json(timeout=10)  # hello
    await ws.receive_json(timeout=10)  # history
    return ws


def _turn_requests(brain: ScriptedBrain) -> list[BrainRequest]:
    return [r for r in brain.requests if r.purpose is Purpose.REPLY]


async def run_scenario(config: Config) -> dict[str, Any]:
    from gateway.app import create_app
    from gateway.runtime import GATEWAY
    from memory.continuity.book import ContinuityBook
    from memory.continuity.handoff import HANDOFF_HEADER, HandoffBook

    brain = ScriptedBrain()
    brain.script = [reply] * 10_000
    app = create_app(config, brain=brain)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        gateway = app[GATEWAY]
        await gateway.ready.wait()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        handoffs = HandoffBook(gateway.store, config.continuity)
        async with aiohttp.ClientSession() as client:
            ws = await _session(client, base, SESSION_ONE)
            for n, line in enumerate(SESSION_ONE_LINES):
                await _say(ws, line, f"s1-{n}")
            if not await gateway.router.drain(60):
                raise RuntimeError("session 1's turns did not finish")
            await ws.close()
            person = await ContinuityBook(gateway.store, config.continuity).person(None)
            for _ in range(1200):
                if await handoffs.latest(person) is not None:
                    break
                await asyncio.sleep(0.05)
            decisions = await ContinuityBook(gateway.store, config.continuity).decisions(person)
            first_of_two = len(_turn_requests(brain))
            ws = await _session(client, base, SESSION_TWO)
            for n in range(TURNS):
                if n == 20:
                    text = "I'm working on the half-marathon pacing now."
                elif n == 35:
                    text = "We decided to taper for three weeks."
                else:
                    text = f"Question {n}: what should I eat before run {n}?"
                await _say(ws, text, f"s2-{n}")
            await ws.close()
        requests = _turn_requests(brain)[first_of_two:]
        first_prefix = split(requests[0])[0]
        note = await handoffs.latest(person)
        recalled = [d for d in decisions if d.text in first_prefix]
        hit, total, sizes, previous, stable = 0, 0, [], None, 0
        for request in requests:
            prefix, cached, whole = split(request)
            sizes.append(cached)
            total += whole
            if prefix == previous:
                hit += cached
                stable += 1
            previous = prefix
        return {
            "handoff_present": bool(
                note is not None and HANDOFF_HEADER in first_prefix and note.text in first_prefix
            ),
            "handoff_method": note.method if note is not None else None,
            "handoff_tokens": note.tokens if note is not None else 0,
            "decisions_recalled": round(len(recalled) / len(decisions), 3) if decisions else None,
            "decisions_logged": len(decisions),
            "prefix_cache_hit_ratio": round(hit / total, 3) if total else None,
            "turns": len(requests),
            "turns_prefix_unchanged": stable,
            "prefix_tokens": {
                "p50": int(statistics.median(sizes)) if sizes else 0,
                "max": max(sizes, default=0),
            },
            "notes": [
                "the scripted brain writes the handoff as the extractive note",
                "tokens are the gateway's estimate (gateway/tokens.py)",
            ],
        }
    finally:
        await runner.cleanup()


async def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentgw-continuity-") as folder:
        result = await run_scenario(bench_config(Path(folder)))
    result["tool_roundtrip_ms"] = await tool_roundtrip_ms()
    return result


def main(args: argparse.Namespace) -> int:
    result = asyncio.run(run())
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        sys.stdout.write(
            f"handoff_present {result['handoff_present']} ({result['handoff_method']}, "
            f"{result['handoff_tokens']} tokens)\n"
            f"decisions_recalled {result['decisions_recalled']} "
            f"of {result['decisions_logged']}\n"
            f"prefix_cache_hit_ratio {result['prefix_cache_hit_ratio']} over "
            f"{result['turns']} turns ({result['turns_prefix_unchanged']} with the prefix "
            f"unchanged)\nprefix_tokens p50 {result['prefix_tokens']['p50']}, "
            f"max {result['prefix_tokens']['max']}\ntool_roundtrip_ms "
            f"p50 {result['tool_roundtrip_ms']['p50']}, p95 {result['tool_roundtrip_ms']['p95']}\n"
        )
    return 0


def _main(args: argparse.Namespace) -> int:
    return main(args)


def add_parser(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = bench_sub.add_parser(
        "continuity", help="handoff, decisions and the cached prefix across sessions"
    )
    bench.add_argument("--json", action="store_true", help="print JSON instead of text")
    bench.set_defaults(bench_main=_main)
