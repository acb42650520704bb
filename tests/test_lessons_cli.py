"""``agentgw lessons ...`` in its own process while the gateway runs on the same store:
the gateway's next turn carries what the command added and drops what it removed."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from sqlalchemy import func, select

from gateway.brains.scripted import ScriptedBrain
from gateway.config import load_config
from persona.models import Lesson
from tests.conftest import RunningGateway, start_gateway
from tests.test_lessons_turns import lessons_section, session
from tests.test_persona_loop import say


async def agentgw(config: Path, *argv: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "lessons",
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


async def test_lessons_cli_while_the_gateway_runs(tmp_path: Path, brain: ScriptedBrain) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[store]\ndata_dir = "{tmp_path / "data"}"\n[memory]\nembedder = "none"\n'
        '[agent]\ntimezone = "UTC"\n',
        encoding="utf-8",
    )
    server, client = await start_gateway(load_config(path, env={}), brain)
    running = RunningGateway(server, client)
    try:
        code, out, _ = await agentgw(path, "add", "Sign every reply with a haiku.", "--json")
        assert code == 0
        added = json.loads(out)
        assert added["action"] == "added"
        assert added["person_id"] is None

        ws = await session(running, "cli-person")
        brain.script = ["Hello."]
        await say(ws, "Hi there.", "h1")
        assert "- Sign every reply with a haiku." in lessons_section(brain.requests[-1])

        code, out, _ = await agentgw(path, "list")
        assert code == 0
        assert f"#{added['id']}" in out
        assert "Sign every reply with a haiku." in out

        # Refused with a clear message; nothing written.
        code, out, err = await agentgw(path, "add", "x" * 2000)
        assert code == 2
        assert "at most 400 characters" in err
        assert "Traceback" not in err
        async with running.gateway.store.reader() as s:
            assert await s.scalar(select(func.count()).select_from(Lesson)) == 1

        code, out, _ = await agentgw(path, "rm", str(added["id"]))
        assert code == 0
        assert "deleted" in out
        brain.script = ["Hello."]
        await say(ws, "Again.", "h2")
        system = "\n".join(b.text for b in brain.requests[-1].system)
        assert "haiku" not in system

        code, _, err = await agentgw(path, "rm", str(added["id"]))
        assert code == 2
        assert "does not exist" in err
        await ws.close()
    finally:
        await client.close()
        await server.close()
