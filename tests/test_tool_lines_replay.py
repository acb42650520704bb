"""The memory tools' "looked up …" lines reach a page that reconnects (issue 24): a
stored turn's lines ride on its reply's history entry, and the turn in flight's on
``history.in_flight``. Through the real Claude adapter and the fake Messages API."""

from __future__ import annotations

from typing import Any

from gateway.hub import ConversationHub
from gateway.messages import TurnEvent, TurnEventKind
from gateway.testing.fake_anthropic import FakeAnthropic
from gateway.testing.fake_model import ToolTurn, ToolUse
from tests.conftest import RunningGateway
from tests.test_e2e_claude import UTILITY_MODEL
from tests.test_memory_tools import claude, fake, open_page, tool_lines, tool_results, turn

__all__ = ["claude", "fake"]  # the fixtures, imported for this module's tests


def searching(answer: str) -> Any:
    def reply(body: dict[str, Any]) -> str | ToolTurn:
        if body["model"] == UTILITY_MODEL:
            return "[]"
        if not tool_results(body):
            return ToolTurn(
                "Let me check. ",
                (ToolUse("memory_search", {"query": "Lena"}), ToolUse("no_such_tool", {})),
            )
        return answer

    return reply


async def history_of(running: RunningGateway, session: str) -> dict[str, Any]:
    ws = await running.ws(session)
    try:
        assert (await ws.receive_json(timeout=5))["type"] == "hello"
        history: dict[str, Any] = await ws.receive_json(timeout=5)
        assert history["type"] == "history"
        return history
    finally:
        await ws.close()


async def test_a_reconnecting_page_gets_the_tool_lines_of_a_stored_turn(
    claude: RunningGateway, fake: FakeAnthropic
) -> None:
    fake.reply = searching("Nothing about Lena yet.")
    ws = await open_page(claude)
    frames = await turn(ws, "Where does my sister Lena live?", "c-1")
    live = tool_lines(frames)
    fake.reply = "Hello again."
    plain = await turn(ws, "Thanks!", "c-2")
    await ws.close()
    assert len(live) == 2
    assert plain[-1]["type"] == "reply"

    history = await history_of(claude, "test-session-1")
    first_user, first_reply, second_user, second_reply = history["messages"]
    assert first_reply["reply_to"] == first_user["message_id"]
    failed = [f["error"] for f in frames if f["type"] == "status" and f.get("state") == "tool"]
    assert first_reply["tool_lines"] == [
        {"text": text, "error": error} for text, error in zip(live, failed, strict=True)
    ]
    assert failed == [False, True]
    # Only a reply the tools came before carries lines.
    assert "tool_lines" not in first_user
    assert "tool_lines" not in second_user
    assert "tool_lines" not in second_reply


async def test_a_page_that_reconnects_mid_turn_gets_the_lines_so_far(
    claude: RunningGateway, fake: FakeAnthropic
) -> None:
    fake.reply = searching("Nothing about Lena yet, I am afraid; tell me more about her.")
    fake.delta_delay_s = 0.3
    ws = await open_page(claude)
    await ws.send_json(
        {"type": "message", "text": "Where does my sister Lena live?", "client_id": "c-1"}
    )
    seen: list[dict[str, Any]] = []
    while not any(f["type"] == "delta" for f in seen[-1:]) or len(tool_lines(seen)) < 2:
        seen.append(await ws.receive_json(timeout=15))
    history = await history_of(claude, "test-session-1")
    flight = history["in_flight"]
    assert flight is not None
    assert [line["text"] for line in flight["tool_lines"]] == tool_lines(seen)
    while seen[-1]["type"] not in ("reply", "error"):
        seen.append(await ws.receive_json(timeout=15))
    await ws.close()
    assert seen[-1]["type"] == "reply"


async def test_the_hub_keeps_a_turns_tool_lines_until_it_ends() -> None:
    hub = ConversationHub()

    def event(kind: TurnEventKind, text: str = "", code: str = "") -> TurnEvent:
        return TurnEvent(kind=kind, conversation_id=1, message_id=5, text=text, code=code)

    await hub.publish(event(TurnEventKind.TOOL, "looked up “Lena”: 2 found"))
    await hub.publish(event(TurnEventKind.TOOL, "no_such_tool failed", "error"))
    await hub.publish(event(TurnEventKind.DELTA, "Let me"))
    flight = hub.in_flight(1)
    assert flight is not None
    assert flight.tools == [("looked up “Lena”: 2 found", False), ("no_such_tool failed", True)]
    assert flight.text == "Let me"
    await hub.publish(event(TurnEventKind.REPLY, "Let me check."))
    assert hub.in_flight(1) is None
