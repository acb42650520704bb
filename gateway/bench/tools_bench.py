"""``tool_roundtrip_ms``: memory_search through the model's tool path (issue 24).

What one call costs the turn between the model asking and the model reading the
answer: the kernel's ``run_call`` (JSON arguments parsed, the tool looked up),
``MemoryToolbox.memory_search`` (the pack's retrieval for the model's query,
the answer filtered and framed as data). The model's own round trip is not in it.

A small store (``items`` synthetic episodes, the pack bench's sentences) in a
temporary folder; ``calls`` searches, the first ``WARM_UP`` not counted.
``agentgw bench continuity`` calls ``tool_roundtrip_ms``; alone:

    python -m gateway.bench.tools_bench [--items 300] [--calls 50] [--embedder none] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gateway.bench.pack_bench import fill, percentile
from gateway.brains.base import ToolCall
from gateway.config import Config, load_config
from gateway.prompt import TurnContext
from gateway.store import Store
from gateway.store.repo import resolve_address
from gateway.tools import run_call
from memory.service import MemoryService
from memory.stages import MemoryPackStage
from memory.tools import MemoryToolbox

WARM_UP = 3
_QUERIES = (
    "hiking trip",
    "my sister",
    "the invoice export",
    "coffee",
    "what did I say about the dentist",
    "Berlin",
    "birthday present",
    "the new job",
)
_WHEN = (None, None, "last month", "in May", None)


async def tool_roundtrip_ms(
    config: Config | None = None, *, calls: int = 50, items: int = 300
) -> dict[str, Any]:
    """memory_search through the tool path: {"p50", "p95", "max", "calls", "items", ...}.

    ``config``: its memory and tools sections are used (the store goes in a temporary
    folder either way); None: the defaults with ``memory.embedder = "none"``.
    """
    if calls < 1 or items < 1:
        raise ValueError("calls and items must be 1 or more")
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-tools-") as folder:
        empty = Path(folder) / "agentgw.toml"
        empty.touch()
        data = str(Path(folder) / "data")
        if config is None:
            config = load_config(
                empty,
                env={},
                overrides={"store": {"data_dir": data}, "memory": {"embedder": "none"}},
            )
        else:
            config = config.replace(store=dataclasses.replace(config.store, data_dir=data, url=""))
        return await _measure(config, calls, items)


async def _measure(config: Config, calls: int, items: int) -> dict[str, Any]:
    async with Store(config.database_url) as store:
        service = await MemoryService.start(store, config)
        try:
            address = await resolve_address(store, "bench", "tools-bench", display_name="Sam")
            await fill(service, address.person_id, address.conversation_id, items)
            await service.lexical(address.person_id, wait=True)
            toolbox = MemoryToolbox(
                service, MemoryPackStage(service, config.memory.history_tokens), config.tools
            )
            rng = random.Random(24)
            asked = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=1)
            timings: list[float] = []
            found: list[int] = []
            for n in range(calls + WARM_UP):
                arguments: dict[str, str] = {"query": rng.choice(_QUERIES)}
                when = rng.choice(_WHEN)
                if when:
                    arguments["when"] = when
                turn = TurnContext(
                    turn_id=n + 1,
                    conversation_id=address.conversation_id,
                    person_id=address.person_id,
                    channel="bench",
                    message_id=0,
                    text="",
                    received_at=asked,
                )
                call = ToolCall(f"call_{n}", "memory_search", json.dumps(arguments))
                began = time.perf_counter()
                result, _record = await run_call(
                    toolbox, turn, call, allowed=True, limit=config.tools.max_calls_per_turn
                )
                elapsed = (time.perf_counter() - began) * 1000
                if result.is_error:
                    raise RuntimeError(f"memory_search failed in the bench: {result.text}")
                if n >= WARM_UP:
                    timings.append(elapsed)
                    found.append(result.text.count("\n- #") + result.text.startswith("- #"))
        finally:
            await service.aclose()
    return {
        "p50": percentile(timings, 0.5),
        "p95": percentile(timings, 0.95),
        "max": round(max(timings), 2),
        "calls": calls,
        "items": items,
        "found_mean": round(sum(found) / len(found), 2),
        "embedder": config.memory.embedder,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--embedder", choices=("none", "minilm"), default="none")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentgw-bench-tools-") as folder:
        empty = Path(folder) / "agentgw.toml"
        empty.touch()
        config = load_config(
            empty,
            env={},
            overrides={
                "store": {"data_dir": str(Path(folder) / "data")},
                "memory": {"embedder": args.embedder},
            },
        )
        result = asyncio.run(tool_roundtrip_ms(config, calls=args.calls, items=args.items))
    figures = {"tool_roundtrip_ms": result}
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:>12}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
