"""Hostile input on /ws: ids past the store's range, nesting deep enough to
recurse the JSON parser to death, text the store cannot encode, frames past
the size limits, and a client that keeps sending garbage. Every one gets an
answer and the socket keeps working, or is closed with a stated code."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest
from aiohttp import WSCloseCode, WSMsgType

from gateway.brains.scripted import ScriptedBrain
from gateway.store.repo import conversation_history
from tests.conftest import RunningGateway, make_config
from tests.test_webchat_protocol import (
    assert_socket_works,
    of_type,
    open_page,
    receive_until,
    send_message,
    serve,
)

HUGE = 99999999999999999999999999


def no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


async def test_a_retry_id_past_the_stores_range_is_a_malformed_frame(
    running: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    ws, _, _ = await open_page(running)
    await ws.send_str(f'{{"type": "retry", "message_id": {HUGE}}}')
    error = await ws.receive_json(timeout=5)
    assert (error["type"], error["code"]) == ("error", "malformed_frame")
    assert "retry_of" not in error
    await assert_socket_works(ws, "c-after-huge-retry")
    await ws.close()
    no_errors_logged(caplog)


@pytest.mark.parametrize("after", [str(HUGE), "-1"])
async def test_an_after_past_the_stores_range_is_refused_with_400(
    running: RunningGateway, after: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await running.session.ws_connect(running.url(f"/ws?session=test-session-1&after={after}"))
    assert refused.value.status == 400
    # The gateway itself is fine: a page with a sane id connects.
    ws, _, _ = await open_page(running)
    await assert_socket_works(ws, "c-after-bad-after")
    await ws.close()
    no_errors_logged(caplog)


@pytest.mark.parametrize(
    "data",
    [
        "[" * 5000 + "]" * 5000,
        '{"a":' * 5000 + "1" + "}" * 5000,
        '{"type": "message", "text": "hi", "client_id": "c-deep", "x": '
        + "[" * 3000
        + "]" * 3000
        + "}",
    ],
    ids=["array", "object", "inside-a-message"],
)
async def test_deep_nesting_is_a_malformed_frame(
    running: RunningGateway, data: str, caplog: pytest.LogCaptureFixture
) -> None:
    ws, hello, _ = await open_page(running)
    assert len(data.encode()) < hello["limits"]["max_frame_bytes"]
    await ws.send_str(data)
    error = await ws.receive_json(timeout=5)
    assert (error["type"], error["code"]) == ("error", "malformed_frame")
    assert "nested" in error["message"]
    await assert_socket_works(ws, "c-after-deep")
    await ws.close()
    no_errors_logged(caplog)


async def test_modest_nesting_is_still_read(running: RunningGateway) -> None:
    """Unknown fields are ignored, nested or not, up to the depth limit."""
    ws, _, _ = await open_page(running)
    data = '{"type": "message", "text": "nested ok", "client_id": "c-nest", "x": [[{"y": [1]}]]}'
    await ws.send_str(data)
    frames = await receive_until(ws, of_type("reply"))
    assert any(f["type"] == "ack" for f in frames)
    assert frames[-1]["text"] == "You said: nested ok"
    await ws.close()


async def test_a_lone_surrogate_is_stored_replaced_and_acked_once(
    running: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    ws, hello, _ = await open_page(running)
    # The JSON is valid; the string it decodes to cannot be encoded as UTF-8.
    frame = r'{"type": "message", "text": "hi \ud800 there\u0000!", "client_id": "c-sur"}'
    await ws.send_str(frame)
    frames = await receive_until(ws, of_type("reply"))
    ack = next(f for f in frames if f["type"] == "ack")
    assert ack["duplicate"] is False
    assert frames[-1]["text"] == "You said: hi \ufffd there\ufffd!"
    await ws.close()

    # The page's outbox resends it after a reconnect: answered from the store.
    ws2, _, _ = await open_page(running, after=frames[-1]["message_id"])
    await ws2.send_str(frame)
    again = await receive_until(ws2, of_type("reply"))
    assert again[0] == {
        "type": "ack",
        "client_id": "c-sur",
        "message_id": ack["message_id"],
        "duplicate": True,
    }
    await ws2.close()
    entries = await conversation_history(running.gateway.store, hello["conversation_id"])
    assert [e.text for e in entries if e.role.value == "user"] == ["hi \ufffd there\ufffd!"]
    no_errors_logged(caplog)


async def test_a_frame_over_the_limit_gets_an_error_up_to_the_transport_cap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One limit, max_frame_bytes: over it an error frame, the socket stays open;
    over 16 times it the frame is not read at all and the socket is closed
    with 1009 (message too big)."""
    config = make_config(tmp_path, webchat={"max_frame_bytes": 2048})
    async with serve(config, ScriptedBrain()) as running:
        ws, _, _ = await open_page(running)
        for size in (2049, 16 * 2048):
            await ws.send_str('{"type": "ping", "pad": "' + "x" * (size - 27) + '"}')
            error = await ws.receive_json(timeout=5)
            assert (error["type"], error["code"]) == ("error", "frame_too_large"), size
        await assert_socket_works(ws, "c-after-large")

        await ws.send_str("x" * (16 * 2048 + 1))
        closing = await ws.receive(timeout=5)
        assert closing.type is WSMsgType.CLOSE
        assert ws.close_code == WSCloseCode.MESSAGE_TOO_BIG
        await ws.close()
        no_errors_logged(caplog)


async def test_a_client_that_keeps_sending_garbage_is_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, webchat={"max_bad_frames_per_minute": 3})
    async with serve(config, ScriptedBrain()) as running:
        ws, _, _ = await open_page(running)
        await send_message(ws, "fine", "c-fine")
        await receive_until(ws, of_type("reply"))
        for _ in range(3):
            await ws.send_str("{not json")
            error = await ws.receive_json(timeout=5)
            assert error["code"] == "malformed_frame"
        await ws.send_str("{not json")
        closing = await ws.receive(timeout=5)
        assert closing.type is WSMsgType.CLOSE
        assert ws.close_code == WSCloseCode.POLICY_VIOLATION
        assert "malformed" in closing.extra
        # A well-behaved page on another socket is not affected.
        other, _, _ = await open_page(running, "test-session-2")
        await assert_socket_works(other, "c-other")
        await other.close()
    no_errors_logged(caplog)
    notes = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert 1 <= len(notes) <= 2, [r.getMessage() for r in notes]
