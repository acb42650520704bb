"""Starting: the port is bound first, messages are taken while the models load, and
the console ends with the URL and "ready", free of other libraries' chatter."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from numpy.typing import NDArray
from playwright.async_api import Browser, expect

from gateway.app import STOP_ON_FAILED_START, create_app
from gateway.bench.gateway_bench import child_environment, free_port
from gateway.brains.scripted import ScriptedBrain
from gateway.config import MemoryConfig
from gateway.errors import AgentGWError
from gateway.runtime import GATEWAY
from gateway.startup import JsonFormatter, OwnOrWarning
from memory.errors import EmbeddingUnavailable
from tests.conftest import make_config, requires_chromium

# A console line of a log record: "2026-01-01 10:00:00,000 INFO name: message".
RECORD = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): ")
OWN = {"gateway", "memory", "persona", "channels", "voice", "web", "__main__"}


class WordEmbedder:
    """Bag-of-words vectors: a stand-in for MiniLM that loads in no time."""

    dim = 64
    model_name = "words-test"

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[row] /= float(np.linalg.norm(out[row])) or 1.0
        return out


def write_config(tmp_path: Path, port: int, *, level: str = "info") -> Path:
    path = tmp_path / "agentgw.toml"
    path.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
        f"[store]\ndata_dir = {json.dumps(str(tmp_path / 'data'))}\n"
        '[brain]\nkind = "scripted"\n'
        '[memory]\nembedder = "none"\n'
        "[voice]\nenabled = false\n"
        f'[log]\nlevel = "{level}"\n',
        encoding="utf-8",
    )
    return path


def agentgw(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        env=child_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one console, in the order a person sees it
        text=True,
    )


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = agentgw("run", "--config", str(write_config(tmp_path, port)), cwd=tmp_path)
        out, _ = process.communicate(timeout=120)
    assert process.returncode == 2, out
    assert out.splitlines() == [
        f"agentgw: port {port} on 127.0.0.1 is in use (another agentgw or program?); "
        "stop it or pick another with --port or server.port"
    ]
    # Refused before anything was opened or loaded.
    assert not (tmp_path / "data").exists()


def read_until(process: subprocess.Popen[str], last: str) -> list[str]:
    """Console lines up to ``last``; fails if the process ends (or is ended after a
    minute) first."""
    assert process.stdout is not None
    lines: list[str] = []
    watchdog = threading.Timer(60, process.kill)
    watchdog.start()
    try:
        while not lines or lines[-1] != last:
            line = process.stdout.readline()
            if not line:
                raise AssertionError(f"the gateway ended before {last!r}:\n" + "\n".join(lines))
            lines.append(line.rstrip("\n"))
    finally:
        watchdog.cancel()
    return lines


def third_party(lines: list[str]) -> list[str]:
    """Records of other libraries below WARNING (and any line that is not a record
    or ours: tqdm bars, banners)."""
    found = []
    for line in lines:
        record = RECORD.match(line)
        if record is None:
            if not line.startswith("agentgw: "):
                found.append(line)
        elif record[1] in ("DEBUG", "INFO") and record[2].split(".")[0] not in OWN:
            found.append(line)
    return found


def test_the_console_of_a_first_start_ends_with_the_url_and_ready(tmp_path: Path) -> None:
    port = free_port()
    process = agentgw("run", "--config", str(write_config(tmp_path, port)), cwd=tmp_path)
    try:
        console = read_until(process, "agentgw: ready")
        # A request (aiohttp logs each at INFO) and a stop add nothing of others either.
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert b'"status": "ok"' in client.recv(65536)
    finally:
        process.terminate()
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, rest
    # A fresh store: the migrations ran, and their 16 INFO records stayed off the console.
    assert (tmp_path / "data" / "agentgw.db").is_file()
    assert third_party(console + rest.splitlines()) == []
    assert console[-2:] == [f"agentgw: serving http://127.0.0.1:{port}/", "agentgw: ready"]


def test_debug_shows_the_other_libraries_records(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port, level="debug")
    process = agentgw("run", "--config", str(config), cwd=tmp_path)
    try:
        console = read_until(process, "agentgw: ready")
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert any("INFO alembic.runtime.migration: Running upgrade" in line for line in console)


def turn_status(database: Path, message_id: int) -> str:
    with sqlite3.connect(database) as connection:
        (status,) = connection.execute(
            "SELECT status FROM turns WHERE inbound_message_id = ?", (message_id,)
        ).fetchone()
    return str(status)


async def frame_of(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    while True:
        frame: dict[str, Any] = await ws.receive_json(timeout=20)
        assert frame["type"] != "error", frame
        if frame["type"] == kind:
            return frame


async def test_a_message_sent_while_the_model_loads_is_stored_acked_then_answered(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    loading, gate = threading.Event(), threading.Event()

    def load(memory: MemoryConfig) -> WordEmbedder:
        # Held in its worker thread, as a slow model load would be.
        loading.set()
        if not gate.wait(60):
            raise EmbeddingUnavailable("the test never let the model load")
        return WordEmbedder()

    brain = ScriptedBrain()
    server = TestServer(create_app(config, brain=brain, load=load), host="127.0.0.1")
    try:
        # Serving does not wait for the model.
        async with asyncio.timeout(30):
            await server.start_server()
            await asyncio.to_thread(loading.wait)
        async with aiohttp.ClientSession() as session:
            async with session.get(server.make_url("/healthz")) as response:
                assert response.status == 200
                assert (await response.json())["status"] == "starting"
            async with session.ws_connect(server.make_url("/ws?session=early-session-1")) as ws:
                hello = await frame_of(ws, "hello")
                assert hello["starting"] is True
                await frame_of(ws, "history")
                await ws.send_json({"type": "message", "text": "are you up?", "client_id": "e-1"})
                ack = await frame_of(ws, "ack")
                # Stored, and its turn waits: the brain was not called.
                database = config.data_dir / "agentgw.db"
                assert await asyncio.to_thread(turn_status, database, ack["message_id"]) == (
                    "received"
                )
                assert brain.requests == []
                gate.set()
                reply = await frame_of(ws, "reply")
                assert (reply["reply_to"], reply["text"]) == (
                    ack["message_id"],
                    "You said: are you up?",
                )
            async with session.get(server.make_url("/healthz")) as response:
                health = await response.json()
            assert health["status"] == "ok"
            assert "memory" in health["stages"]["context"]
            # The turn ran with the loaded model: its messages were embedded.
            gateway = server.app[GATEWAY]
            assert gateway.memory is not None
            assert gateway.memory.embedder is not None
            assert gateway.memory.embedder.model_name == "words-test"
    finally:
        gate.set()
        await server.close()


def test_json_log_lines_are_one_object_each() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("gateway.app").makeRecord(
            "gateway.app", logging.ERROR, __file__, 1, "could not %s", ("start",), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"]) == (
        "ERROR",
        "gateway.app",
        "could not start",
    )
    assert "ValueError: boom" in entry["exc"]


def test_other_libraries_show_from_warning_and_ours_at_any_level() -> None:
    def shown(name: str, level: int) -> bool:
        return OwnOrWarning().filter(logging.LogRecord(name, level, __file__, 1, "x", (), None))

    assert not shown("onnx_ir.passes.common.unused_removal", logging.INFO)
    assert not shown("alembic.runtime.migration", logging.INFO)
    assert shown("alembic.runtime.migration", logging.WARNING)
    assert shown("memory.embed_onnx", logging.INFO)
    assert shown("gateway", logging.DEBUG)


@requires_chromium
@pytest.mark.slow
async def test_the_page_says_the_agent_is_loading_until_it_answers(
    tmp_path: Path, browser: Browser
) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    gate = threading.Event()

    def load(memory: MemoryConfig) -> WordEmbedder:
        if not gate.wait(60):
            raise EmbeddingUnavailable("the test never let the model load")
        return WordEmbedder()

    server = TestServer(create_app(config, brain=ScriptedBrain(), load=load), host="127.0.0.1")
    try:
        async with asyncio.timeout(30):
            await server.start_server()
        page = await browser.new_page()
        await page.goto(str(server.make_url("/")))
        status = page.locator("#conn-text")
        await expect(status).to_have_text("Connected (the agent is still loading)")
        await page.get_by_label("Message to Ada").fill("are you there?")
        await page.keyboard.press("Enter")
        # Kept: the page shows it stored, and the answer comes once the model is in.
        await expect(page.locator("#log > li.msg.user")).to_have_attribute(
            "data-status", "received"
        )
        gate.set()
        await expect(page.locator("#log > li.msg.assistant .bubble")).to_have_text(
            "You said: are you there?"
        )
        await expect(status).to_have_text("Connected")
    finally:
        gate.set()
        await server.close()


async def test_a_failure_after_serving_began_stops_the_gateway(tmp_path: Path) -> None:
    """What is built in the background fails: the process is told to stop (exit 2 in
    `agentgw run`) instead of taking messages it would never answer."""
    exemplars = tmp_path / "exemplars.md"
    exemplars.write_text("## Off voice\n- Whatever.\n", encoding="utf-8")
    config = make_config(
        tmp_path, memory={"embedder": "minilm"}, persona={"exemplars_file": str(exemplars)}
    )
    app = create_app(config, brain=ScriptedBrain(), load=lambda _: WordEmbedder())
    stopped: asyncio.Future[AgentGWError] = asyncio.get_running_loop().create_future()
    app[STOP_ON_FAILED_START] = stopped.set_result
    server = TestServer(app, host="127.0.0.1")
    try:
        await server.start_server()
        error = await asyncio.wait_for(stopped, 30)
        assert "no '## In voice' replies" in str(error)
        assert not app[GATEWAY].ready.is_set()
    finally:
        await server.close()
