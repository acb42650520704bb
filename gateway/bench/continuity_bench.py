"""``agentgw bench continuity``: a scripted person over two sessions on two linked
webchat identities (so two conversations), through a real app on loopback, the
real router, pipeline, stages and store, and the real Claude adapter talking to
the fake Messages API on loopback (gateway/testing/fake_anthropic.py).

Session 1 sets a focus, logs decisions, asks an open question and states a plan,
then closes its page: the session's end writes the handoff note (asked by the
utility model's call for a note, the fake answers with the extractive note of
the person's lines, as no model can run here). Session 2 runs 50
turns, with a focus change and one more decision in the middle.

Keys: ``handoff_present`` (session 2's first prompt has the note, in the cached
prefix), ``decisions_recalled`` (the fraction of session 1's decisions in session
2's first cached prefix), ``prefix_cache_hit_ratio`` (over session 2's 50 turns:
the fake's ``cache_read_input_tokens`` over all input tokens, read + written +
uncached — the tool definitions, system prompt and history included),
``prefix_tokens`` (p50/max of the system prompt up to its cache mark),
``tool_roundtrip_ms`` (memory_search through the model's tool path, p50/p95
over 50 calls on a 300-item store:
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
from gateway.bench.webchat_page import open_session, say
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


REPLY_MODEL = "claude-sonnet-5-5"
UTILITY_MODEL = "claude-haiku-5-5"
BENCH_KEY = "bench-key"


def bench_config(
    data_dir: Path, base_url: str, extra: dict[str, dict[str, Any]] | None = None
) -> Config:
    empty = data_dir / "agentgw.toml"
    empty.touch()
    overrides: dict[str, dict[str, Any]] = {
        "store": {"data_dir": str(data_dir / "data")},
        "memory": {"embedder": "none"},
        "agent": {"timezone": "UTC"},
        "observe": {"observer": "rules"},
        "brain": {"kind": "claude", "timeout_s": 30.0, "max_retries": 0},
        "claude": {"reply_model": REPLY_MODEL, "utility_model": UTILITY_MODEL},
        # 57 messages in a few seconds: the per-page limit would refuse some.
        "webchat": {"rate_per_minute": 10_000},
        "upkeep_jobs": {"session_idle_s": 0.0, "session_close_s": 0.0},
        "links": {"people": [f"webchat:{SESSION_ONE} webchat:{SESSION_TWO}"]},
    }
    for section, values in (extra or {}).items():
        overrides.setdefault(section, {}).update(values)
    return load_config(
        empty,
        env={"ANTHROPIC_API_KEY": BENCH_KEY, "ANTHROPIC_BASE_URL": base_url},
        overrides=overrides,
    )


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "\n".join(str(part.get("text", "")) for part in value if isinstance(part, dict))


def reply(body: dict[str, Any]) -> str:
    """The fake Claude's answers: a short one to a turn; to the handoff's utility call, the
    extractive note of the person's lines in the transcript (no model can run here)."""
    from memory.continuity.handoff import HANDOFF_INSTRUCTIONS, extractive_note

    if HANDOFF_INSTRUCTIONS in _text(body.get("system", "")):
        from datetime import datetime

        said = []
        for line in _text(body["messages"][-1]["content"]).splitlines():
            found = re.match(r"^\[(\d{4}-\d\d-\d\d)\] user: (.*)$", line)
            if found:
                said.append((found.group(2), datetime.fromisoformat(found.group(1))))
        return extractive_note(said)
    return "Noted."


def cached_prefix(body: dict[str, Any]) -> str:
    """The session-start prefix of a Messages request: its system blocks up to the last
    one with a cache mark (what the handoff and decisions must be inside)."""
    system = body.get("system") or []
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
    )
    marked = max((i for i, b in enumerate(blocks) if b.get("cache_control")), default=-1)
    return "\n\n".join(str(b.get("text", "")) for b in blocks[: marked + 1])


async def run_scenario(
    data_dir: Path, extra: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    from gateway.app import create_app
    from gateway.brains.claude import ClaudeBrain
    from gateway.runtime import GATEWAY
    from gateway.testing.fake_anthropic import FakeAnthropic
    from memory.continuity.book import ContinuityBook
    from memory.continuity.handoff import HANDOFF_HEADER, HandoffBook

    async with FakeAnthropic(reply=reply, api_key=BENCH_KEY, chunk_chars=64) as fake:
        config = bench_config(data_dir, fake.base_url, extra)
        app = create_app(config, brain=ClaudeBrain.from_config(config))
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
                ws = await open_session(client, base, SESSION_ONE)
                for n, line in enumerate(SESSION_ONE_LINES):
                    await say(ws, line, f"s1-{n}", timeout=60)
                if not await gateway.router.drain(60):
                    raise RuntimeError("session 1's turns did not finish")
                await ws.close()
                person = await ContinuityBook(gateway.store, config.continuity).person(None)
                for _ in range(1200):
                    if await handoffs.latest(person) is not None:
                        break
                    await asyncio.sleep(0.05)
                book = ContinuityBook(gateway.store, config.continuity)
                decisions = await book.decisions(person)
                # The reply model's calls (the utility model's, such as the handoff, apart).
                first_of_two = sum(1 for model, _ in fake.usages if model == REPLY_MODEL)
                bodies_before = sum(
                    1 for r in fake.message_requests if r.body["model"] == REPLY_MODEL
                )
                ws = await open_session(client, base, SESSION_TWO)
                for n in range(TURNS):
                    if n == 20:
                        text = "I'm working on the half-marathon pacing now."
                    elif n == 35:
                        text = "We decided to taper for three weeks."
                    else:
                        text = f"Question {n}: what should I eat before run {n}?"
                    await say(ws, text, f"s2-{n}", timeout=60)
                await ws.close()
            note = await handoffs.latest(person)
        finally:
            await runner.cleanup()
    bodies = [r.body for r in fake.message_requests if r.body["model"] == REPLY_MODEL]
    bodies = bodies[bodies_before:]
    usages = [u for model, u in fake.usages if model == REPLY_MODEL][first_of_two:]
    first_prefix = cached_prefix(bodies[0]) if bodies else ""
    recalled = [d for d in decisions if d.text in first_prefix]
    sizes, previous, stable = [], None, 0
    for body in bodies:
        prefix = cached_prefix(body)
        sizes.append(estimate_tokens(prefix))
        stable += prefix == previous
        previous = prefix
    read = sum(u["cache_read_input_tokens"] for u in usages)
    written = sum(u["cache_creation_input_tokens"] for u in usages)
    total = read + written + sum(u["input_tokens"] for u in usages)
    return {
        "handoff_present": bool(
            note is not None and HANDOFF_HEADER in first_prefix and note.text in first_prefix
        ),
        "handoff_method": note.method if note is not None else None,
        "handoff_tokens": note.tokens if note is not None else 0,
        "decisions_recalled": round(len(recalled) / len(decisions), 3) if decisions else None,
        "decisions_logged": len(decisions),
        "prefix_cache_hit_ratio": round(read / total, 3) if total else None,
        "cache_write_ratio": round(written / total, 3) if total else None,
        "prompt_tokens": total,
        "turns": len(bodies),
        "turns_prefix_unchanged": stable,
        "prefix_tokens": {
            "p50": int(statistics.median(sizes)) if sizes else 0,
            "max": max(sizes, default=0),
        },
        "notes": [
            "through the real Claude adapter against the fake Messages API "
            "(gateway/testing/fake_anthropic.py), whose prompt cache reads the longest "
            "prefix written at an earlier breakpoint, looked up from each breakpoint and up "
            "to 20 blocks before it, as Anthropic's does",
            "the fake answers the handoff's utility call with the extractive note",
            "tokens are the gateway's estimate (gateway/tokens.py)",
        ],
    }


async def run(extra: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentgw-continuity-") as folder:
        result = await run_scenario(Path(folder), extra)
    result["tool_roundtrip_ms"] = await tool_roundtrip_ms()
    return result


def main(args: argparse.Namespace) -> int:
    extra: dict[str, dict[str, Any]] = {}
    if args.history_tokens is not None:
        extra["memory"] = {"history_tokens": args.history_tokens}
    if args.history_step_share is not None:
        extra["context"] = {"history_step_share": args.history_step_share}
    result = asyncio.run(run(extra))
    if extra:
        result["settings"] = extra
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
    bench.add_argument(
        "--history-tokens",
        type=int,
        help=(
            "memory.history_tokens for the run (small: the window fills and moves; "
            "default: the config's)"
        ),
    )
    bench.add_argument(
        "--history-step-share",
        type=float,
        help=(
            "context.history_step_share for the run (0: the window slides a message a "
            "turn; default: the config's)"
        ),
    )
    bench.set_defaults(bench_main=_main)
