"""The cluster fan-out's relay (gateway/fanout.py), without a server: which events
ask the other processes to claim a turn, and which go out at once."""

from __future__ import annotations

from gateway.fanout import TurnFanout, decode, encode
from gateway.hub import ConversationHub
from gateway.messages import TurnEvent, TurnEventKind
from gateway.store import Store
from gateway.store.notify import PgListener

URL = "postgresql+asyncpg://agentgw@127.0.0.1:1/agentgw"  # never connected to


def _fanout() -> TurnFanout:
    return TurnFanout(Store(URL), ConversationHub(), PgListener(URL), "this-process")


def _sent(fanout: TurnFanout) -> list[tuple[TurnEventKind, bool]]:
    """What the next batch would carry: each event's kind and whether it asks others."""
    payloads = [
        payload
        for seq, (event, nudge) in enumerate(fanout._outbox)
        for payload in encode(fanout.origin, seq, event, nudge=nudge)
    ]
    return [(event.kind, nudge) for _origin, event, _fetch, nudge in map(decode, payloads)]


def test_a_message_asks_the_others_to_claim_only_while_its_process_cannot_run_turns() -> None:
    fanout = _fanout()
    ready = True
    fanout.asks_others = lambda: not ready
    fanout._relay(TurnEvent(TurnEventKind.MESSAGE, 1, 10, text="runs here"))
    ready = False  # as while the models load: stored here, run elsewhere
    fanout._relay(TurnEvent(TurnEventKind.MESSAGE, 2, 11, text="run it for me"))
    fanout._relay(TurnEvent(TurnEventKind.DELTA, 2, 11, text="a delta never asks"))
    assert _sent(fanout) == [
        (TurnEventKind.MESSAGE, False),
        (TurnEventKind.MESSAGE, True),
        (TurnEventKind.DELTA, False),
    ]


def test_deltas_wait_for_their_batch_and_a_reply_goes_at_once() -> None:
    fanout = _fanout()
    fanout._relay(TurnEvent(TurnEventKind.DELTA, 1, 10, text="You "))
    fanout._relay(TurnEvent(TurnEventKind.DELTA, 1, 10, text="said"))
    assert not fanout._urgent.is_set()
    assert _sent(fanout) == [(TurnEventKind.DELTA, False)]  # merged into one
    fanout._relay(TurnEvent(TurnEventKind.REPLY, 1, 10, text="You said", reply_id=12))
    assert fanout._urgent.is_set()
