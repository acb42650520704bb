"""``lessons_applied`` for ``agentgw bench trust``: corrections in session 1, checked in
session 2's prompt.

One person talks to the gateway over two webchat sessions (linked as one person,
so two conversations): a real app on loopback, the real router, pipeline, stages
and store, and the scripted brain (the extractor is therefore the no-model one).
Session 1 mixes ordinary chat, messages that only look like corrections ("no
worries", "stop by later") and corrections, among them one that a later one
contradicts ("don't call me Bob", then "call me Bob"). Session 2 sends one
message; its prompt is read as the brain received it.

Keys: ``lessons_applied`` (the fraction of session 1's corrections whose lesson
is in the cached prefix of session 2's prompt, the contradicted one counting
only when its newer form is there and the older gone), ``false_lessons`` (lessons
learned from the look-alikes), ``stale_in_prompt`` (replaced lessons still in the
prompt), ``lesson_tokens`` (the lessons' share of the prompt).

Run alone: ``python -m gateway.bench.trust_lessons [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gateway.app import create_app
from gateway.bench.webchat_page import open_session, say
from gateway.brains.base import BrainRequest
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config, load_config
from gateway.runtime import GATEWAY
from gateway.tokens import estimate_tokens
from persona.lessons.book import HEADER
from persona.lessons.stages import build_book


@dataclass(frozen=True)
class Correction:
    message: str
    # Words the lesson must hold in session 2's prompt (case-insensitive).
    expect: tuple[str, ...]
    # Words that must not be there (the older lesson a contradiction replaces).
    gone: tuple[str, ...] = ()


CHAT = (
    "Hi! Can you help me plan a trip to Porto next month?",
    "No worries, take your time.",
    "I don't know yet how many days.",
    "Stop by later if you think of anything.",
    "Call me tomorrow with ideas?",
    "What's wrong with going in winter?",
)
CORRECTIONS = (
    Correction("Please stop adding emojis to everything.", ("emoji",)),
    Correction("Don't call me Bob.", ("call the user bob",), ()),
    Correction("I'd rather take the train than fly.", ("train", "fly")),
    Correction("Your answers are way too long.", ("short",)),
    Correction("No, I meant Porto, not Lisbon.", ("porto", "lisbon")),
    Correction("Never recommend hostels, please.", ("hostels",)),
    Correction("Actually, call me Bob.", ("call the user bob.",), ("do not call the user bob",)),
)
CONTRADICTED = CORRECTIONS[1]
SESSION_ONE = "trust-lessons-1"
SESSION_TWO = "trust-lessons-2"


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
            "links": {"people": [f"webchat:{SESSION_ONE} webchat:{SESSION_TWO}"]},
        },
    )


def cached_prefix(request: BrainRequest) -> str:
    marked = max((i for i, b in enumerate(request.system) if b.cache), default=-1)
    return "\n\n".join(b.text for b in request.system[: marked + 1])


def lessons_part(request: BrainRequest) -> str:
    for block in request.system:
        for part in block.text.split("\n\n"):
            if part.startswith(HEADER):
                return part
    return ""


async def run_scenario(config: Config) -> dict[str, Any]:
    """The two sessions through a real app on loopback; the figures of the module."""
    brain = ScriptedBrain(prefix="Noted: ")
    app = create_app(config, brain=brain)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        gateway = app[GATEWAY]
        await gateway.ready.wait()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as client:
            ws = await open_session(client, base, SESSION_ONE)
            n = 0
            for chat, correction in zip(CHAT, CORRECTIONS[: len(CHAT)], strict=True):
                for text in (chat, correction.message):
                    n += 1
                    await say(ws, text, f"s1-{n}")
            for correction in CORRECTIONS[len(CHAT) :]:
                n += 1
                await say(ws, correction.message, f"s1-{n}")
            await ws.close()
            if not await gateway.router.drain(60):
                raise RuntimeError("session 1's turns did not finish")
            ws = await open_session(client, base, SESSION_TWO)
            await say(ws, "Hello again, where were we?", "s2-1")
            await ws.close()
        request = brain.requests[-1]
        prefix = cached_prefix(request).lower()
        applied = [
            c.message
            for c in CORRECTIONS
            if all(w in prefix for w in c.expect) and not any(w in prefix for w in c.gone)
        ]
        book = build_book(config.lessons, gateway.store, None)
        lessons = await book.listed()
        from_chat = [x.text for x in lessons if x.source_text in CHAT]
        stale = [x.text for x in lessons if x.replaced_by is not None and x.text.lower() in prefix]
        section = lessons_part(request)
        # "Don't call me Bob" is contradicted later: the pair counts once, by its newer form.
        counted = [c.message for c in CORRECTIONS if c is not CONTRADICTED]
        hits = [m for m in counted if m in applied]
        return {
            "lessons_applied": round(len(hits) / len(counted), 3),
            "corrections": len(counted),
            "applied": len(hits),
            "missed": [m for m in counted if m not in applied],
            "false_lessons": len(from_chat),
            "false_lesson_texts": from_chat,
            "stale_in_prompt": len(stale),
            "lessons_stored": len(lessons),
            "lesson_tokens": estimate_tokens(section),
            "prompt_lessons": section.splitlines()[1:],
            "extractor": "rules",
        }
    finally:
        await runner.cleanup()


async def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentgw-trust-lessons-") as folder:
        return await run_scenario(bench_config(Path(folder)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON (default: text)")
    args = parser.parse_args(argv)
    result = asyncio.run(run())
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        sys.stdout.write(
            f"lessons_applied {result['lessons_applied']} "
            f"({result['applied']}/{result['corrections']} corrections of session 1 "
            "in session 2's cached prefix)\n"
            f"false_lessons {result['false_lessons']}, stale_in_prompt "
            f"{result['stale_in_prompt']}, lesson tokens {result['lesson_tokens']}\n"
        )
        for line in result["prompt_lessons"]:
            sys.stdout.write(f"  {line}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
