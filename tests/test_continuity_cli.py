"""``agentgw working-memory ...`` and ``agentgw decision ...`` in their own process
while the gateway runs on the same store: the gateway's next turn carries what they
wrote; bad input (too long, unknown person, several people and no --person) gives a
clear error and changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from sqlalchemy import func, select

from gateway.brains.scripted import ScriptedBrain
from gateway.config import load_config
from memory.continuity.book import FOCUS_HEADER
from memory.continuity.models import Decision, FocusEntry
from tests.conftest import RunningGateway, start_gateway
from tests.test_lessons_turns import persona_block, session
from tests.test_persona_loop import say


async def agentgw(config: Path, *argv: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *argv,
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def counts(running: RunningGateway) -> tuple[int, int]:
    async with running.gateway.store.reader() as s:
        focus = await s.scalar(select(func.count()).select_from(FocusEntry))
        decisions = await s.scalar(select(func.count()).select_from(Decision))
    return int(focus or 0), int(decisions or 0)


async def test_continuity_cli_while_the_gateway_runs(tmp_path: Path, brain: ScriptedBrain) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[store]\ndata_dir = "{tmp_path / "data"}"\n[memory]\nembedder = "none"\n'
        '[agent]\ntimezone = "UTC"\n',
        encoding="utf-8",
    )
    server, client = await start_gateway(load_config(path, env={}), brain)
    running = RunningGateway(server, client)
    try:
        # No person yet: a clear error.
        code, _, err = await agentgw(path, "working-memory", "show")
        assert code == 2
        assert "no person in the store yet" in err

        ws = await session(running, "cli-person-one")
        brain.script = ["Hello."]
        await say(ws, "Hi there.", "h1")

        # One person: --person may be left out.
        code, out, _ = await agentgw(
            path, "working-memory", "set", "Debugging the invoice export", "--json"
        )
        assert code == 0, out
        shown = json.loads(out)
        assert shown["focus"] == "Debugging the invoice export"
        assert shown["faded"] is False
        person = shown["person_id"]
        code, out, _ = await agentgw(
            path, "working-memory", "update", "CSV encoding fixed", "--person", str(person)
        )
        assert code == 0
        assert "CSV encoding fixed" in out
        code, out, _ = await agentgw(path, "decision", "log", "Ship on Friday", "--tag", "release")
        assert code == 0
        assert "logged #" in out
        assert "[release]" in out

        brain.script = ["OK."]
        await say(ws, "What now?", "h2")
        block = persona_block(brain.requests[-1])
        assert f"{FOCUS_HEADER} (set today" in block
        assert "Debugging the invoice export" in block
        assert "CSV encoding fixed" in block
        assert "Ship on Friday [release]" in block

        code, out, _ = await agentgw(path, "decision", "list", "--last", "5", "--json")
        assert code == 0
        listed = json.loads(out)
        assert [d["text"] for d in listed] == ["Ship on Friday"]
        assert listed[0]["tags"] == ["release"]

        # Bad input: clear errors, nothing written.
        before = await counts(running)
        for argv, message in (
            (("working-memory", "set", "x" * 5000), "at most 400 characters"),
            (("decision", "log", "y" * 5000), "at most 400 characters"),
            (("decision", "log", "Use Postgres", "--person", "999"), "person 999 does not exist"),
            (("working-memory", "set", "Focus", "--person", "999"), "person 999 does not exist"),
            (("decision", "log", "Use Postgres", "--tag", "two words"), "tag"),
            (("decision", "log", "Use Postgres", "--reverses", "12345"), "does not exist"),
            (("decision", "list", "--last", "0"), "--last must be 1 or more"),
        ):
            code, _, err = await agentgw(path, *argv)
            assert code == 2, argv
            assert message in err, (argv, err)
            assert "Traceback" not in err
        assert await counts(running) == before

        code, out, _ = await agentgw(path, "working-memory", "clear")
        assert code == 0
        assert "cleared: Debugging the invoice export" in out
        brain.script = ["OK."]
        await say(ws, "And now?", "h3")
        assert "invoice export" not in persona_block(brain.requests[-1])

        # A second person: --person is needed.
        other = await session(running, "cli-person-two")
        brain.script = ["Hi."]
        await say(other, "Hello!", "o1")
        code, _, err = await agentgw(path, "decision", "list")
        assert code == 2
        assert "2 people in the store: say which with --person ID" in err
        await ws.close()
        await other.close()
    finally:
        await client.close()
        await server.close()
