"""Reading import files safely: the size limit, UTF-8, JSON, and the format's name.

Every error names the file (and the line where it is known). Text that is not
valid UTF-8 is read with each bad byte replaced by U+FFFD, and the first bad
line is reported (``Decoded.replaced_at``): a note is kept, its damage visible.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory.errors import PortingError

FORMATS = ("agentgw", "openclaw", "chatgpt", "claude")
OPENCLAW_FILES = ("MEMORY.md", "USER.md", "SOUL.md", "IDENTITY.md")
CHATGPT_SHARD = re.compile(r"^conversations(?:-\d{3,})?\.json$")


@dataclass(frozen=True)
class Decoded:
    text: str
    # The first line holding bytes that were not UTF-8 (replaced by U+FFFD), or None.
    replaced_at: int | None = None


def read_bytes(path: Path, max_bytes: int) -> bytes:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise PortingError(
                f"{path}: {size:,} bytes, over memory.import_max_bytes ({max_bytes:,})"
            )
        return path.read_bytes()
    except OSError as exc:
        raise PortingError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def read_text(path: Path, max_bytes: int) -> Decoded:
    data = read_bytes(path, max_bytes)
    try:
        return Decoded(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return Decoded(data.decode("utf-8", errors="replace"), line)


def read_json(path: Path, max_bytes: int) -> Any:
    decoded = read_text(path, max_bytes)
    if decoded.replaced_at is not None:
        raise PortingError(f"{path}: line {decoded.replaced_at}: not UTF-8, not a JSON export")
    try:
        return json.loads(decoded.text)
    except json.JSONDecodeError as exc:
        raise PortingError(
            f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg}); "
            "is the file cut short?"
        ) from exc


def chatgpt_shards(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if CHATGPT_SHARD.match(p.name))


def _json_kind(path: Path) -> str | None:
    """chatgpt or claude by the first conversation's keys (reads the start only)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(65536).decode("utf-8", errors="replace")
    except OSError as exc:
        raise PortingError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    # The key seen first: a message's text may quote the other one.
    seen = {
        k: head.find(f'"{key}"') for k, key in (("chatgpt", "mapping"), ("claude", "chat_messages"))
    }
    found = [(at, kind) for kind, at in seen.items() if at >= 0]
    return min(found)[1] if found else None


def detect(path: Path) -> str:
    """The format of a file or folder, from its content."""
    if not path.exists():
        raise PortingError(f"{path}: no such file or folder")
    if path.is_file():
        if path.suffix == ".jsonl":
            with path.open("rb") as handle:
                if b'"agentgw-memory"' in handle.readline():
                    return "agentgw"
        if path.suffix == ".json":
            kind = _json_kind(path)
            if kind is not None:
                return kind
        if path.suffix == ".md":
            return "openclaw"
        raise PortingError(f"{path}: unknown format (not an agentgw, ChatGPT or Claude export)")
    if (path / "agentgw.jsonl").is_file() or any(path.glob("person-*/agentgw.jsonl")):
        return "agentgw"
    shards = chatgpt_shards(path)
    if shards:
        kind = _json_kind(shards[0])
        if kind is not None:
            return kind
        raise PortingError(f"{shards[0]}: unknown format (neither ChatGPT nor Claude)")
    if any((path / name).is_file() for name in OPENCLAW_FILES) or (path / "memory").is_dir():
        return "openclaw"
    raise PortingError(
        f"{path}: unknown format: no agentgw.jsonl, conversations.json, MEMORY.md or memory/"
    )
