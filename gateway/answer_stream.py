"""One round of the brain's answer, streamed to the conversation as it comes.

The turn's streaming contract, apart from the rest of the turn
(``gateway/pipeline.py``): every text delta is published on the hub and kept in
``streamed`` (a reply that breaks off keeps what the person saw); the first
token must come within ``first_token_timeout_s`` (else ``brain_timeout``), and
until it does a ``WAITING`` event goes out every ``waiting_notice_s``; a stream
that ends without its closing completion is ``BrainInterrupted``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.brains.base import Brain, BrainRequest, Completion, TextDelta
from gateway.errors import BrainInterrupted, BrainTimeout
from gateway.hub import ConversationHub
from gateway.messages import TurnEvent, TurnEventKind
from gateway.store.repo import StoredInbound

log = logging.getLogger(__name__)


async def publish_delta(hub: ConversationHub, inbound: StoredInbound, text: str) -> None:
    await hub.publish(
        TurnEvent(
            TurnEventKind.DELTA,
            inbound.address.conversation_id,
            inbound.message_id,
            text=text,
        )
    )


async def stream_answer(
    brain: Brain,
    hub: ConversationHub,
    inbound: StoredInbound,
    request: BrainRequest,
    streamed: list[str],
    *,
    first_token_timeout_s: float,
    waiting_notice_s: float,
    on_first_token: Callable[[], None],
    first_round: bool = True,
) -> Completion:
    """The brain's answer, its deltas published and collected in ``streamed``.

    The first-token deadline and the WAITING notices belong to the first round: a
    round after tool calls follows the "looked up …" lines the person already saw.
    ``on_first_token`` is called when the first text arrives (the stage timeline).
    """
    first_token = asyncio.Event()
    if not first_round:
        first_token.set()  # no deadline, no notices, no first-token stage
    notices = asyncio.create_task(
        notify_waiting(hub, inbound, first_token, waiting_notice_s),
        name=f"turn-{inbound.turn_id}-waiting",
    )
    limit = first_token_timeout_s if first_round else 0.0
    try:
        async with asyncio.timeout(limit or None) as first:
            async for event in brain.stream(request):
                if isinstance(event, TextDelta):
                    if not event.text:
                        continue
                    if not first_token.is_set():
                        first.reschedule(None)
                        first_token.set()
                        on_first_token()
                        # A notice being sent right now goes out before the delta.
                        await asyncio.wait([notices])
                    streamed.append(event.text)
                    await publish_delta(hub, inbound, event.text)
                else:
                    return event
    except TimeoutError:
        if first.expired():
            raise BrainTimeout(f"{brain.name}: no first token within {limit:g} s") from None
        raise
    finally:
        first_token.set()
        await end_notices(notices)
    raise BrainInterrupted(f"{brain.name}: the answer stream ended early")


async def notify_waiting(
    hub: ConversationHub, inbound: StoredInbound, first_token: asyncio.Event, every_s: float
) -> None:
    """A WAITING event every ``every_s`` until the first token comes."""
    if every_s <= 0:
        return
    started = time.monotonic()
    while True:
        try:
            await asyncio.wait_for(first_token.wait(), every_s)
        except TimeoutError:
            await hub.publish(
                TurnEvent(
                    TurnEventKind.WAITING,
                    inbound.address.conversation_id,
                    inbound.message_id,
                    waited_s=round(time.monotonic() - started, 1),
                )
            )
        else:
            return


async def end_notices(notices: asyncio.Task[None]) -> None:
    """Stop a turn's WAITING notices; one that failed is logged, not the turn's failure."""
    if not notices.done():
        notices.cancel()
    await asyncio.wait([notices])
    if not notices.cancelled() and notices.exception() is not None:
        log.warning("waiting notice failed: %r", notices.exception())
