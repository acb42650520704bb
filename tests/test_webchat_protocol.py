"""The /ws protocol over real WebSockets: dedup, reconnect, streaming catch-up,
ordering, bad frames, rate limit and retry of a failed turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.brains.base import BrainEvent, BrainRequest, TextDelta
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.errors import BrainUnavailable
from gateway.store import TurnStatus
from gateway.store.repo import conversation_history
from tests.conftest import RunningGateway, make_config, start_gateway

Frame = dict[str, Any]


async def receive_until(
    ws: aiohttp.ClientWebSocketResponse, done: Callable[[Frame], bool], timeout: float = 10
) -> list[Frame]:
    """Frames up to and including the first one ``done`` accepts."""
    frames: list[Frame] = []
    while True:
        frame = await ws.receive_json(timeout=timeout)
        frames.append(frame)
        if done(frame):
            return frames


def of_type(kind: str) -> Callable[[Frame], bool]:
    return lambda frame: frame["type"] == kind


async def open_page(
    running: RunningGateway, session: str = "test-session-1", after: int = 0
) -> tuple[aiohttp.ClientWebSocketResponse, Frame, Frame]:
    ws = await running.ws(session, after)
    hello = await ws.receive_json(timeout=5)
    history = await ws.receive_json(timeout=5)
    assert (hello["type"], history["type"]) == ("hello", "history")
    return ws, hello, history


async def send_message(ws: aiohttp.ClientWebSocketResponse, text: str, client_id: str) -> None:
    await ws.send_json({"type": "message", "text": text, "client_id": client_id})


async def assert_socket_works(ws: aiohttp.ClientWebSocketResponse, client_id: str) -> None:
    await send_message(ws, "still there?", client_id)
    frames = await receive_until(ws, of_type("reply"))
    assert any(f["type"] == "ack" and f["client_id"] == client_id for f in frames)
    assert frames[-1]["text"] == "You said: still there?"


@asynccontextmanager
async def serve(config: Config, brain: ScriptedBrain) -> AsyncIterator[RunningGateway]:
    server, session = await start_gateway(config, brain)
    try:
        yield RunningGateway(server, session)
    finally:
        await session.close()
        await server.close()


@dataclass
class HeldBrain(ScriptedBrain):
    """Holds a call whose message is a key of ``holds`` until that event is set;
    ``streamed`` is set once the first delta of a held call has gone out, and
    ``arrived`` lists the messages of the calls in the order they came in."""

    holds: dict[str, asyncio.Event] = field(default_factory=dict)
    hold_after_first_delta: bool = False
    streamed: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: list[str] = field(default_factory=list)
    _arrival: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_arrivals(self, count: int, timeout: float = 10) -> None:
        """Until ``count`` calls have come in (held ones included)."""
        async with asyncio.timeout(timeout):
            while len(self.arrived) < count:
                self._arrival.clear()
                await self._arrival.wait()

    async def stream(self, request: BrainRequest) -> AsyncIterator[BrainEvent]:
        self.arrived.append(request.messages[-1].text)
        self._arrival.set()
        hold = self.holds.get(request.messages[-1].text)
        if hold is not None and not self.hold_after_first_delta:
            await hold.wait()
        first = True
        async for event in super().stream(request):
            yield event
            if hold is not None and first and isinstance(event, TextDelta):
                first = False
                self.streamed.set()
                await hold.wait()


@pytest.fixture
def brain() -> HeldBrain:
    """This module's brain: scripted, and able to hold chosen calls."""
    return HeldBrain()


# ------------------------------------------------------------------ dedup


async def test_resent_client_id_is_acked_as_duplicate_and_replayed(
    running: RunningGateway, brain: HeldBrain
) -> None:
    brain.script = ["First and only answer."]
    ws, hello, _ = await open_page(running)
    await send_message(ws, "hello", "c-dup")
    frames = await receive_until(ws, of_type("reply"))
    ack = next(f for f in frames if f["type"] == "ack")
    assert ack["duplicate"] is False
    reply = frames[-1]
    await ws.close()

    # The page lost the ack and resends after reconnecting.
    ws2, _, _ = await open_page(running, after=reply["message_id"])
    await send_message(ws2, "hello", "c-dup")
    again = await receive_until(ws2, of_type("reply"))
    assert [f["type"] for f in again] == ["ack", "reply"]
    assert again[0] == {
        "type": "ack",
        "client_id": "c-dup",
        "message_id": ack["message_id"],
        "duplicate": True,
    }
    assert again[1]["message_id"] == reply["message_id"]
    assert again[1]["reply_to"] == ack["message_id"]
    assert again[1]["text"] == "First and only answer."
    assert len(brain.requests) == 1
    await ws2.close()

    entries = await conversation_history(running.gateway.store, hello["conversation_id"])
    assert [(e.role.value, e.text) for e in entries] == [
        ("user", "hello"),
        ("assistant", "First and only answer."),
    ]


async def test_resend_while_the_turn_runs_is_answered_once(
    running: RunningGateway, brain: HeldBrain
) -> None:
    brain.gate = asyncio.Event()
    first, _, _ = await open_page(running)
    await send_message(first, "slow one", "c-run")
    acked = await receive_until(first, of_type("ack"))
    message_id = acked[-1]["message_id"]
    await brain.wait_arrivals(1)

    second, _, history = await open_page(running)
    assert [m["message_id"] for m in history["messages"]] == [message_id]
    assert history["messages"][0]["status"] == TurnStatus.GENERATING.value
    await send_message(second, "slow one", "c-run")
    dup = await second.receive_json(timeout=5)
    assert dup == {"type": "ack", "client_id": "c-run", "message_id": message_id, "duplicate": True}

    brain.gate.set()
    for ws in (first, second):
        frames = await receive_until(ws, of_type("reply"))
        assert [f["type"] for f in frames if f["type"] != "delta"] == ["reply"]
        assert frames[-1]["reply_to"] == message_id
    assert len(brain.requests) == 1
    # Nothing more is on its way to either page: a ping is answered straight away.
    for ws in (first, second):
        await ws.send_json({"type": "ping"})
        assert await ws.receive_json(timeout=5) == {"type": "pong"}
        await ws.close()


async def test_same_client_id_from_two_pages_at_once_is_stored_once(
    running: RunningGateway, brain: HeldBrain
) -> None:
    """Both inserts race; the one that loses the unique constraint gets the stored copy."""
    brain.script = ["One answer for both pages."]
    first, hello, _ = await open_page(running)
    second, _, _ = await open_page(running)
    frame = {"type": "message", "text": "sent twice", "client_id": "c-race"}
    await asyncio.gather(first.send_json(frame), second.send_json(frame))
    acks = []
    for ws in (first, second):
        frames = await receive_until(ws, lambda f: f["type"] in ("ack", "error"))
        acks.append(frames[-1])
    assert [a["type"] for a in acks] == ["ack", "ack"], acks
    assert acks[0]["message_id"] == acks[1]["message_id"]
    assert sorted(a["duplicate"] for a in acks) == [False, True]
    for ws in (first, second):
        frames = await receive_until(ws, of_type("reply"))
        assert frames[-1]["reply_to"] == acks[0]["message_id"]
        assert not [f for f in frames if f["type"] == "error"]
        await ws.close()
    assert len(brain.requests) == 1
    entries = await conversation_history(running.gateway.store, hello["conversation_id"])
    assert [(e.role.value, e.text) for e in entries] == [
        ("user", "sent twice"),
        ("assistant", "One answer for both pages."),
    ]


# -------------------------------------------------------------- reconnect


async def test_reconnect_with_after_gets_only_the_missed_messages(
    running: RunningGateway,
) -> None:
    ws, _, _ = await open_page(running)
    await send_message(ws, "one", "c-1")
    first_reply = (await receive_until(ws, of_type("reply")))[-1]
    await ws.close()

    # While the page is away, another page of the same session goes on talking.
    other, _, _ = await open_page(running)
    await send_message(other, "two", "c-2")
    second_reply = (await receive_until(other, of_type("reply")))[-1]
    await other.close()

    back, _, history = await open_page(running, after=first_reply["message_id"])
    assert [(m["role"], m["text"]) for m in history["messages"]] == [
        ("user", "two"),
        ("assistant", "You said: two"),
    ]
    assert history["messages"][1]["message_id"] == second_reply["message_id"]
    assert history["messages"][1]["reply_to"] == second_reply["reply_to"]
    assert history["messages"][0]["status"] == "replied"
    assert history["in_flight"] is None
    await back.close()


async def test_page_connecting_mid_stream_gets_in_flight_then_the_reply(
    running: RunningGateway, brain: HeldBrain
) -> None:
    release = asyncio.Event()
    brain.script = ["Streaming: part one, then part two, then the end."]
    brain.holds = {"tell me": release}
    brain.hold_after_first_delta = True
    brain.chunk_chars = 10
    sender, _, _ = await open_page(running)
    await send_message(sender, "tell me", "c-stream")
    await asyncio.wait_for(brain.streamed.wait(), 10)

    late, _, history = await open_page(running)
    user = history["messages"][0]
    assert history["in_flight"] == {"reply_to": user["message_id"], "text": "Streaming:"}
    release.set()
    frames = await receive_until(late, of_type("reply"))
    rest = "".join(f["text"] for f in frames if f["type"] == "delta")
    reply = frames[-1]
    assert reply["reply_to"] == user["message_id"]
    assert history["in_flight"]["text"] + rest == reply["text"]
    assert reply["text"] == "Streaming: part one, then part two, then the end."
    await late.close()
    await sender.close()


# --------------------------------------------------------------- ordering


async def test_turns_of_one_conversation_run_in_order_others_concurrently(
    running: RunningGateway, brain: HeldBrain
) -> None:
    hold_a1 = asyncio.Event()
    brain.holds = {"a1": hold_a1}
    page_a, _, _ = await open_page(running, "session-aaaa")
    page_b, _, _ = await open_page(running, "session-bbbb")
    await send_message(page_a, "a1", "a-1")
    await send_message(page_a, "a2", "a-2")
    await brain.wait_arrivals(1)
    assert brain.arrived == ["a1"]
    await send_message(page_b, "b1", "b-1")

    # B's turn completes while A's first turn is held, and A's second waits.
    b_frames = await receive_until(page_b, of_type("reply"))
    assert b_frames[-1]["text"] == "You said: b1"
    assert brain.arrived == ["a1", "b1"]

    hold_a1.set()
    a_frames = await receive_until(
        page_a, lambda f: f["type"] == "reply" and f["text"] == "You said: a2"
    )
    replies = [f["text"] for f in a_frames if f["type"] == "reply"]
    assert replies == ["You said: a1", "You said: a2"]
    # a2 started streaming only after a1's reply was out.
    streamed = [(f["type"], f.get("reply_to")) for f in a_frames if f["type"] != "message"]
    a1_id, a2_id = (f["message_id"] for f in a_frames if f["type"] == "ack")
    first_a2 = streamed.index(("delta", a2_id))
    assert streamed.index(("reply", a1_id)) < first_a2
    assert all(reply_to == a2_id for _, reply_to in streamed[first_a2:])
    assert brain.arrived == ["a1", "b1", "a2"]
    assert [r.messages[-1].text for r in brain.requests] == ["b1", "a1", "a2"]
    await page_a.close()
    await page_b.close()


# ------------------------------------------------------------- bad frames


async def test_bad_frames_get_error_frames_and_the_socket_keeps_working(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path, webchat={"max_frame_bytes": 2048, "max_message_chars": 300})
    brain = ScriptedBrain()
    async with serve(config, brain) as running:
        ws, hello, _ = await open_page(running)
        assert hello["limits"]["max_frame_bytes"] == 2048
        assert hello["limits"]["max_message_chars"] == 300

        cases: list[tuple[str, str, dict[str, Any]]] = [
            ("{not json", "malformed_frame", {}),
            ('["a", "list"]', "malformed_frame", {}),
            ('{"type": "shout", "text": "hi"}', "malformed_frame", {}),
            ('{"type": "message", "text": "no id"}', "malformed_frame", {}),
            (
                '{"type": "message", "text": "  ", "client_id": "c-blank"}',
                "malformed_frame",
                {"client_id": "c-blank"},
            ),
            ('{"type": "retry", "message_id": "seven"}', "malformed_frame", {}),
            ('{"type": "retry", "message_id": true}', "malformed_frame", {}),
            (
                '{"type": "message", "text": "' + "x" * 3000 + '", "client_id": "c-big"}',
                "frame_too_large",
                {},
            ),
            (
                '{"type": "message", "text": "' + "y" * 301 + '", "client_id": "c-long"}',
                "frame_too_large",
                {"client_id": "c-long"},
            ),
        ]
        for data, code, names in cases:
            await ws.send_str(data)
            error = await ws.receive_json(timeout=5)
            assert error["type"] == "error", data
            assert error["code"] == code, data
            assert error["message"]
            for key, value in names.items():
                assert error[key] == value
            if not names:
                assert "client_id" not in error
                assert "reply_to" not in error

        await ws.send_bytes(b"\x00\x01binary")
        error = await ws.receive_json(timeout=5)
        assert (error["type"], error["code"]) == ("error", "malformed_frame")

        await assert_socket_works(ws, "c-after-bad")
        assert not ws.closed
        assert len(brain.requests) == 1
        await ws.close()


async def test_rate_limit_answers_rate_limited_and_stores_nothing(tmp_path: Path) -> None:
    brain = ScriptedBrain()
    async with serve(make_config(tmp_path, webchat={"rate_per_minute": 2}), brain) as running:
        ws, hello, _ = await open_page(running)
        for n in (1, 2):
            await send_message(ws, f"m{n}", f"c-{n}")
            await receive_until(ws, of_type("reply"))
        await send_message(ws, "m3", "c-3")
        error = await ws.receive_json(timeout=5)
        assert error["type"] == "error"
        assert error["code"] == "rate_limited"
        assert error["client_id"] == "c-3"
        # The socket stays usable, and the refused message was not stored.
        await ws.send_json({"type": "ping"})
        assert await ws.receive_json(timeout=5) == {"type": "pong"}
        entries = await conversation_history(running.gateway.store, hello["conversation_id"])
        assert [e.text for e in entries if e.role.value == "user"] == ["m1", "m2"]
        assert len(brain.requests) == 2
        await ws.close()


# ------------------------------------------------------------------ retry


async def test_retry_of_a_failed_turn_replies_and_ends_replied(
    running: RunningGateway, brain: HeldBrain
) -> None:
    brain.script = [BrainUnavailable("the model could not be reached"), "Better now."]
    ws, hello, _ = await open_page(running)
    conversation_id = hello["conversation_id"]
    await send_message(ws, "try me", "c-retry")
    frames = await receive_until(ws, of_type("error"))
    message_id = next(f for f in frames if f["type"] == "ack")["message_id"]
    assert frames[-1]["code"] == "brain_unavailable"
    assert frames[-1]["reply_to"] == message_id
    entries = await conversation_history(running.gateway.store, conversation_id)
    assert (entries[0].status, entries[0].error_code) == (TurnStatus.FAILED, "brain_unavailable")

    await ws.send_json({"type": "retry", "message_id": message_id})
    frames = await receive_until(ws, of_type("reply"))
    assert frames[0] == {"type": "retrying", "message_id": message_id}
    reply = frames[-1]
    assert (reply["reply_to"], reply["text"]) == (message_id, "Better now.")
    assert "".join(f["text"] for f in frames if f["type"] == "delta") == "Better now."
    assert len(brain.requests) == 2

    entries = await conversation_history(running.gateway.store, conversation_id)
    user = entries[0]
    assert (user.status, user.error_code) == (TurnStatus.REPLIED, None)
    assert [(e.role.value, e.reply_to) for e in entries] == [
        ("user", None),
        ("assistant", message_id),
    ]

    # A turn that is not failed (any more) is not run again.
    await ws.send_json({"type": "retry", "message_id": message_id})
    error = await ws.receive_json(timeout=5)
    assert (error["code"], error["retry_of"]) == ("not_retryable", message_id)
    await ws.send_json({"type": "retry", "message_id": 9999})
    error = await ws.receive_json(timeout=5)
    assert (error["code"], error["retry_of"]) == ("not_retryable", 9999)
    assert len(brain.requests) == 2
    await ws.close()


async def test_retry_cannot_reach_another_conversations_turn(
    running: RunningGateway, brain: HeldBrain
) -> None:
    brain.script = [BrainUnavailable("down")]
    owner, owner_hello, _ = await open_page(running, "session-owner")
    await send_message(owner, "mine", "c-own")
    frames = await receive_until(owner, of_type("error"))
    message_id = frames[-1]["reply_to"]

    stranger, _, _ = await open_page(running, "session-stranger")
    await stranger.send_json({"type": "retry", "message_id": message_id})
    error = await stranger.receive_json(timeout=5)
    assert (error["code"], error["retry_of"]) == ("not_retryable", message_id)
    entries = await conversation_history(running.gateway.store, owner_hello["conversation_id"])
    assert entries[0].status is TurnStatus.FAILED
    assert len(brain.requests) == 1
    await owner.close()
    await stranger.close()


@pytest.mark.parametrize("frame", [{"type": "retry"}, {"type": "retry", "message_id": 0}])
async def test_retry_needs_a_message_id(running: RunningGateway, frame: Frame) -> None:
    ws, _, _ = await open_page(running)
    await ws.send_json(frame)
    error = await ws.receive_json(timeout=5)
    assert (error["type"], error["code"]) == ("error", "malformed_frame")
    await ws.close()
