"""A stored tree node as the pack, the panel and the cached tree read it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memory.embed import from_blob
from memory.tree import build as tb


@dataclass
class NodeView:
    """A stored node as the pack and the panel read it."""

    key: str
    level: int
    summary: str
    item_ids: list[int]
    child_keys: list[str]
    parent_keys: list[str]
    quotes: list[tb.Quote]
    model: str
    version: int
    first_at: datetime | None
    last_at: datetime | None
    speakers: set[str] = field(default_factory=set)
    vector: NDArray[np.float32] | None = None  # see TreeNode.vector


def aware(at: datetime) -> datetime:
    """A stored time read back without its zone (SQLite) is UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def quote_of(raw: Sequence[Any]) -> tb.Quote:
    """A stored quote, ``[iso date, speaker, sentence, item id]``."""
    return tb.Quote(
        aware(datetime.fromisoformat(str(raw[0]))), str(raw[1]), str(raw[2]), int(raw[3])
    )


def view_of(row: Any) -> NodeView:
    """A node from its stored columns (anything with them as attributes: a Core row of
    ``memory_tree_nodes``)."""
    return node_view(
        row.key,
        row.level,
        row.summary,
        row.item_ids,
        row.child_keys,
        row.parent_keys,
        row.quotes,
        row.model,
        row.version,
        row.first_at,
        row.last_at,
        row.vector,
    )


def node_view(
    key: str,
    level: int,
    summary: str,
    item_ids: Sequence[int],
    child_keys: Sequence[str],
    parent_keys: Sequence[str],
    quotes: Sequence[Sequence[Any]],
    model: str,
    version: int,
    first_at: datetime | None,
    last_at: datetime | None,
    vector: bytes | None,
) -> NodeView:
    """A node from its stored values (quotes and vector as stored)."""
    parsed = [quote_of(q) for q in quotes]
    return NodeView(
        key,
        level,
        summary,
        list(item_ids),
        list(child_keys),
        list(parent_keys),
        parsed,
        model,
        version,
        first_at,
        last_at,
        {q.speaker for q in parsed},
        from_blob(vector) if vector is not None else None,
    )
