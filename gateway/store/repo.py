"""The queries of the core, each one short transaction on the Store.

By what they store: who is speaking (``gateway.store.addresses``), a turn's rows
(``gateway.store.turns``) and a conversation's history for pages
(``gateway.store.history``). Every name is importable from here as before.
"""

from __future__ import annotations

from gateway.store.addresses import (
    Address,
    count_refusal,
    find_address,
    resolve_address,
)
from gateway.store.history import HistoryEntry, conversation_history, tool_lines
from gateway.store.turns import (
    REPLIED_CHANNEL,
    ClaimLost,
    PastRow,
    StoredInbound,
    StoredReply,
    TurnStart,
    fail_turn,
    fail_unfinished_turns,
    find_by_client_id,
    finish_turn,
    hold_claim,
    record_turn_values,
    reopen_failed_turn,
    replied_by,
    replied_payload,
    start_turn,
    store_inbound,
)

__all__ = [
    "REPLIED_CHANNEL",
    "Address",
    "ClaimLost",
    "HistoryEntry",
    "PastRow",
    "StoredInbound",
    "StoredReply",
    "TurnStart",
    "conversation_history",
    "count_refusal",
    "fail_turn",
    "fail_unfinished_turns",
    "find_address",
    "find_by_client_id",
    "finish_turn",
    "hold_claim",
    "record_turn_values",
    "reopen_failed_turn",
    "replied_by",
    "replied_payload",
    "resolve_address",
    "start_turn",
    "store_inbound",
    "tool_lines",
]
