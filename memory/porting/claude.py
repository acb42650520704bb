"""A Claude.ai export: ``conversations.json``.

Conversations carry ``uuid``, ``name``, ``created_at`` and ``chat_messages``;
a message has ``sender`` ("human" or "assistant" — not ``role``), ``text``,
``content`` blocks, ``attachments`` (``extracted_content``) and an ISO-8601
``created_at``. A message whose ``text`` is empty but whose blocks hold text
is a real message; a tool-only turn is kept as what the tool did
("[tool_use web_search: ...]"), and an attachment-only message as its file's
name and extracted text. Only a message with nothing at all is left out.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.store.models import MessageRole
from memory.errors import PortingError
from memory.porting.conversations import SourceConversation, SourceMessage
from memory.porting.sources import chatgpt_shards, read_json

SOURCE = "claude"


def _when(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"created_at {value!r} is not an ISO-8601 time")
    at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if at.tzinfo is None:
        raise ValueError(f"created_at {value!r} has no time zone")
    return at


def _block(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "tool_use":
        given = json.dumps(block.get("input") or {}, ensure_ascii=False, sort_keys=True)
        return f"[tool_use {block.get('name', '?')}: {given}]"
    if kind == "tool_result":
        inner = block.get("content")
        if isinstance(inner, list):
            inner = " ".join(str(b.get("text", "")) for b in inner if isinstance(b, dict))
        return f"[tool_result {block.get('name', '')}: {inner or ''}]".replace(" :", ":")
    return ""


def message_text(message: dict[str, Any]) -> str:
    text = str(message.get("text") or "").strip()
    if not text:
        text = "\n".join(
            t for b in message.get("content") or () if isinstance(b, dict) if (t := _block(b))
        ).strip()
    files = []
    for attachment in message.get("attachments") or ():
        name = attachment.get("file_name") or "attachment"
        extracted = str(attachment.get("extracted_content") or "").strip()
        files.append(f"[attachment {name}]" + (f"\n{extracted}" if extracted else ""))
    return "\n\n".join(p for p in (text, *files) if p)


def conversation(data: dict[str, Any], person_name: str) -> SourceConversation:
    key = str(data.get("uuid") or "")
    if not key:
        raise ValueError("a conversation without a uuid")
    messages = []
    for message in data.get("chat_messages") or ():
        sender = message.get("sender")
        if sender not in ("human", "assistant"):
            raise ValueError(f"message {message.get('uuid')}: sender {sender!r}")
        text = message_text(message)
        if not text:
            continue
        human = sender == "human"
        messages.append(
            SourceMessage(
                key=f"{SOURCE}:{message.get('uuid')}",
                role=MessageRole.USER if human else MessageRole.ASSISTANT,
                text=text,
                at=_when(message.get("created_at") or data.get("created_at")),
                speaker=person_name if human else "Claude",
            )
        )
    return SourceConversation(SOURCE, key, str(data.get("name") or ""), tuple(messages))


def read(path: Path, max_bytes: int, person_name: str) -> list[SourceConversation]:
    files = chatgpt_shards(path) if path.is_dir() else [path]
    out = []
    for file in files:
        data = read_json(file, max_bytes)
        if not isinstance(data, list):
            raise PortingError(f"{file}: not a Claude export (a list of conversations expected)")
        for n, item in enumerate(data):
            try:
                out.append(conversation(item, person_name))
            except (ValueError, TypeError, AttributeError) as exc:
                raise PortingError(f"{file}: conversation {n + 1}: {exc}") from exc
    return out
