"""``MEMORY.md`` (the curated profile) and ``tree.md`` (the memory tree) of an export.

Like the other readable files (markdown.py) they are a view of the record's rows,
so they depend only on what the store holds. ``MEMORY.md`` is the newest
profile version (memory/continuity/profile.py), the short text every prompt
carries; ``tree.md`` is the person's tree, root → topics → clusters → leaves,
each node with its dates, version, writer and member ids. A tree past
``MAX_LINES`` keeps its upper levels in ``tree.md`` and puts each topic's
clusters and leaves in a file of its own (``tree-t3.md``), split further into
numbered parts when one topic alone is longer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any

from memory.porting.markdown import MAX_LINES, one_line, split_parts

_DATED = re.compile(r"^\d{4}-\d\d-\d\d ")
PROFILE_TITLE = "What I know about them (curated profile)"


def _day(value: datetime | None, zone: tzinfo) -> str:
    if value is None:
        return "?"
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(zone).date().isoformat()


def render_profile(name: str, profiles: Sequence[dict[str, Any]], zone: tzinfo) -> dict[str, str]:
    """``MEMORY.md``: the newest profile version, one line each with its sources."""
    who = name or "them"
    header = f"# MEMORY: {who}"
    if not profiles:
        return {"MEMORY.md": f"{header}\n\n(no profile yet: the weekly job writes it)\n"}
    newest = max(profiles, key=lambda p: p["id"])
    lines = [
        f"{PROFILE_TITLE}, version of {_day(newest['created_at'], zone)} "
        f"({newest['method']}) <!-- profile #{newest['id']} -->",
        "",
    ]
    for entry in newest["lines"] or []:
        sources = " ".join(str(s) for s in entry.get("sources", []))
        lines.append(f"- {one_line(str(entry.get('text', '')))} <!-- {sources} -->")
    return split_parts("MEMORY", header, lines)


def _item_count(node: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> int:
    """The items under a node; the root keeps only its topics (memory/tree/models.py)."""
    if node["level"] < 3:
        return len(node["item_ids"])
    return len({i for k in node["child_keys"] if k in nodes for i in nodes[k]["item_ids"]})


def _node_head(node: dict[str, Any], nodes: dict[str, dict[str, Any]], zone: tzinfo) -> str:
    names = {3: "Root", 2: "Topic", 1: "Cluster"}
    span = f"{_day(node['first_at'], zone)} to {_day(node['last_at'], zone)}"
    mark = ", corrected by hand" if node["corrected"] else ""
    return (
        f"{names.get(node['level'], 'Node')} {node['key']} ({span}; "
        f"version {node['version']}, {node['model']}{mark}; {_item_count(node, nodes)} items)"
    )


def _summary(node: dict[str, Any]) -> list[str]:
    return [f"> {line.strip()}" for line in str(node["summary"]).splitlines() if line.strip()]


def _leaf(node: dict[str, Any], zone: tzinfo) -> str:
    ids = " ".join(f"#{i}" for i in node["item_ids"])
    text = one_line(str(node["summary"])) or "(no text)"
    if not _DATED.match(text):  # an extractive leaf quotes its date already
        text = f"{_day(node['first_at'], zone)} {text}"
    return f"- {text} <!-- {node['key']} {ids} -->"


def _subtree(
    key: str, nodes: dict[str, dict[str, Any]], depth: int, zone: tzinfo, seen: set[str]
) -> list[str]:
    """The node and what is under it: headings for clusters and up, bullets for leaves."""
    node = nodes.get(key)
    if node is None:
        return []
    if node["level"] == 0:
        return [_leaf(node, zone)]
    out = ["", f"{'#' * depth} {_node_head(node, nodes, zone)}", "", *_summary(node)]
    children = [c for c in node["child_keys"] if c in nodes]
    leaves = [c for c in children if nodes[c]["level"] == 0]
    if leaves:
        out.append("")
    out.extend(_leaf(nodes[c], zone) for c in leaves)
    # A leaf may sit under two clusters (soft assignment); a cluster under one topic.
    for child in children:
        if nodes[child]["level"] > 0 and child not in seen:
            seen.add(child)
            out.extend(_subtree(child, nodes, min(depth + 1, 6), zone, seen))
    return out


def render_tree(name: str, rows: Sequence[dict[str, Any]], zone: tzinfo) -> dict[str, str]:
    """``tree.md`` (and per-topic files when it is long): the person's memory tree."""
    who = name or "them"
    header = f"# Memory tree: {who}"
    nodes = {row["key"]: row for row in sorted(rows, key=lambda r: (r["level"], r["key"]))}
    if not nodes:
        return {"tree.md": f"{header}\n\n(no tree yet: memory.tree is off or nothing is built)\n"}
    # Tops: the root, and any node no parent in the tree names (a tree mid-update).
    named = {c for n in nodes.values() for c in n["child_keys"]}
    tops = sorted(
        (k for k, n in nodes.items() if k not in named and n["level"] > 0),
        key=lambda k: (-nodes[k]["level"], k),
    )
    seen = set(tops)
    whole = [line for top in tops for line in _subtree(top, nodes, 2, zone, seen)]
    body = whole[1:] if whole and not whole[0] else whole
    if len(body) + 3 <= MAX_LINES:
        return {"tree.md": f"{header}\n\n" + "".join(f"{line}\n" for line in body)}
    # Too long: the levels above the clusters here, each topic's branch in its own file.
    files: dict[str, str] = {}
    outline: list[str] = []
    for top in tops:
        outline.extend(["", f"## {_node_head(nodes[top], nodes, zone)}", "", *_summary(nodes[top])])
        for child in nodes[top]["child_keys"]:
            node = nodes.get(child)
            if node is None or node["level"] == 0:
                continue
            stem = "tree-" + "".join(ch if ch.isalnum() else "-" for ch in child)
            branch = _subtree(child, nodes, 2, zone, set())
            parts = split_parts(stem, f"{header}: {child}", branch[1:])
            files.update(parts)
            outline.append(f"- {_node_head(node, nodes, zone)}: in {', '.join(sorted(parts))}")
    files.update(split_parts("tree", header, outline[1:]))
    return files
