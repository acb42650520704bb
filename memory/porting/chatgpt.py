"""A ChatGPT data export: ``conversations.json`` or its ``conversations-000.json`` shards.

Each conversation holds a ``mapping`` of nodes ``{id, message, parent, children}``
and a ``current_node``: the visible thread is the path from ``current_node``
up through ``parent`` to the root, reversed. Edits and regenerations leave side
branches; they are not the conversation and are not imported. Message times are
epoch seconds (``create_time``; the previous message's, else the conversation's,
when a message has none).
System and hidden messages are left out; a tool's output is kept, said by "tool".
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.store.models import MessageRole
from memory.errors import PortingError
from memory.porting.conversations import SourceConversation, SourceMessage
from memory.porting.sources import chatgpt_shards, read_json

SOURCE = "chatgpt"
SPEAKERS = {"user": None, "assistant": "ChatGPT", "tool": "tool"}


def _when(value: Any, fallback: datetime | None) -> datetime | None:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC)
    return fallback


def _text(content: dict[str, Any]) -> str:
    parts = []
    for part in content.get("parts") or ():
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict):
            # An image or a file pointer: named, so the turn is not an empty one.
            kind = part.get("content_type", "attachment")
            parts.append(str(part.get("text") or f"[{kind}]"))
    if not parts and isinstance(content.get("text"), str):
        parts.append(content["text"])
    return "\n".join(p for p in parts if p).strip()


def visible_thread(mapping: dict[str, Any], current: str | None) -> list[dict[str, Any]]:
    """The nodes from the root down to ``current`` (the last leaf when none is named)."""
    if current is None or current not in mapping:
        leaves = [k for k, n in mapping.items() if not n.get("children")]
        current = leaves[-1] if leaves else None
    path, seen = [], set()
    while current is not None and current in mapping and current not in seen:
        seen.add(current)
        node = mapping[current]
        path.append(node)
        current = node.get("parent")
    return path[::-1]


def conversation(data: dict[str, Any], person_name: str) -> SourceConversation:
    key = str(data.get("conversation_id") or data.get("id") or "")
    mapping = data.get("mapping")
    if not key or not isinstance(mapping, dict):
        raise ValueError("a conversation without an id or a mapping")
    started = _when(data.get("create_time"), None)
    messages: list[SourceMessage] = []
    for node in visible_thread(mapping, data.get("current_node")):
        message = node.get("message")
        if not isinstance(message, dict):
            continue
        role = (message.get("author") or {}).get("role")
        hidden = (message.get("metadata") or {}).get("is_visually_hidden_from_conversation")
        if role not in SPEAKERS or hidden:
            continue
        text = _text(message.get("content") or {})
        # A message without a time is dated as the one before it (or the conversation).
        at = _when(message.get("create_time"), messages[-1].at if messages else started)
        if not text:
            continue
        if at is None:
            raise ValueError(f"message {message.get('id')}: no create_time, nor the conversation's")
        messages.append(
            SourceMessage(
                key=f"{SOURCE}:{message.get('id') or node.get('id')}",
                role=MessageRole.USER if role == "user" else MessageRole.ASSISTANT,
                text=text,
                at=at,
                speaker=SPEAKERS[role] or person_name,
            )
        )
    return SourceConversation(SOURCE, key, str(data.get("title") or ""), tuple(messages))


def read(path: Path, max_bytes: int, person_name: str) -> list[SourceConversation]:
    files = chatgpt_shards(path) if path.is_dir() else [path]
    out = []
    for file in files:
        data = read_json(file, max_bytes)
        if not isinstance(data, list):
            raise PortingError(f"{file}: not a ChatGPT export (a list of conversations expected)")
        for n, item in enumerate(data):
            try:
                out.append(conversation(item, person_name))
            except (ValueError, TypeError, AttributeError) as exc:
                raise PortingError(f"{file}: conversation {n + 1}: {exc}") from exc
    return out
