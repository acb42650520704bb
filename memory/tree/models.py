"""The memory tree's tables: nodes and the versions of their summaries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, utcnow


class TreeNode(Base):
    """One node: level 0 a leaf (one memory item, or a note of episodes), 1 a cluster,
    2 a topic, 3 the root. A node's members are its item ids and, above the leaves,
    its children's keys; the root's are its topics only (``members_of`` gives its
    items): a list of every item id, rewritten at every update, was half its cost."""

    __tablename__ = "memory_tree_nodes"
    __table_args__ = (
        Index("ix_memory_tree_nodes_person_level", "person_id", "level"),
        # An update reads and writes its few nodes by key (migration 0035): without it
        # SQLite read every node of the person, item lists and all.
        Index("ix_memory_tree_nodes_person_key", "person_id", "key"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    person_id: Mapped[int] = mapped_column(
        ForeignKey("people.id", ondelete="CASCADE"), nullable=False
    )
    # Stable within a person: "item:12", "note:3:2023-05-08:Caroline", "c:7", "t:2", "root".
    key: Mapped[str] = mapped_column(String(200), nullable=False)
    level: Mapped[int] = mapped_column(Integer, nullable=False)
    parent_keys: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Memory item ids under the node (levels 0-2; empty for the root, migration 0035),
    # and the child keys (levels 1-3).
    item_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    child_keys: Mapped[list[str]] = mapped_column(JSON, default=list)
    summary: Mapped[str] = mapped_column(Text, default="")
    # The summary as data: [[iso date, speaker, verbatim sentence, item id], ...]
    # (extractive), empty for an abstractive one.
    quotes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    model: Mapped[str] = mapped_column(String(100), default="extractive")
    version: Mapped[int] = mapped_column(Integer, default=1)
    # A person's correction by hand: the next rebuild keeps this summary.
    corrected: Mapped[bool] = mapped_column(default=False)
    first_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # float32 bytes, so an incremental update reads no member (migration 0032): a leaf's
    # mean item vector, a cluster's sum of its leaves' unit vectors, a topic's sum of its
    # clusters' unit centroids. None on a tree built before it (the next update rebuilds).
    vector: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class TreeNodeVersion(Base):
    """Every summary a node ever had: a summary is never silently overwritten."""

    __tablename__ = "memory_tree_versions"
    __table_args__ = (Index("ix_memory_tree_versions_node", "person_id", "key", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    person_id: Mapped[int] = mapped_column(
        ForeignKey("people.id", ondelete="CASCADE"), nullable=False
    )
    key: Mapped[str] = mapped_column(String(200), nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    summary: Mapped[str] = mapped_column(Text, default="")
    item_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    # The node's children then (migration 0035): what the root's version was made of.
    child_keys: Mapped[list[str]] = mapped_column(JSON, default=list, server_default="[]")
    model: Mapped[str] = mapped_column(String(100), default="extractive")
    # "build", "update", "rebuild" or "correction".
    reason: Mapped[str] = mapped_column(String(20), default="build")
    written_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
