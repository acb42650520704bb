"""``/panel/tree``: a person's memory tree (issue 23) — root, topics, clusters and
leaves, collapsible, each node with its summary, members, dates, the model that
wrote it and its versions; a summary can be corrected by hand (a new version,
kept by later rebuilds). ``?diff=KEY&a=N&b=M`` shows the line diff between two
versions of a node (difflib), and ``?q=WORDS`` highlights the nodes whose summary
holds the words and opens the path to each (root → topic → cluster → leaf)."""

from __future__ import annotations

import difflib
from typing import Any

from aiohttp import web

from memory.tree.service import MemoryTree, members_of
from memory.tree.view import NodeView
from web.panel.people import named_people
from web.panel.render import bad_request, gateway_of, json_body, not_found, query_int, render


def tree_of(request: web.Request) -> MemoryTree:
    memory = gateway_of(request).memory
    if memory is None:
        raise not_found("memory is off")
    return memory.tree


def _node(
    node: NodeView, nodes: dict[str, NodeView], hits: set[str], path: set[str]
) -> dict[str, Any]:
    return {
        "hit": node.key in hits,
        "on_path": node.key in path,
        "key": node.key,
        "level": node.level,
        "summary": node.summary,
        "model": node.model,
        "version": node.version,
        "members": members_of(nodes, node.key),
        "first": node.first_at.date().isoformat() if node.first_at else "",
        "last": node.last_at.date().isoformat() if node.last_at else "",
        "children": [_node(nodes[k], nodes, hits, path) for k in node.child_keys if k in nodes],
    }


async def tree_data(request: web.Request) -> dict[str, Any]:
    async with gateway_of(request).store.reader() as session:
        choices = await named_people(session)
    person = query_int(request.query, "person", 0, lo=0, hi=2**62)
    if not person and choices:
        person = choices[0][0]
    data: dict[str, Any] = {
        "person": person,
        "people": [{"id": i, "name": n} for i, n in choices],
        "root": None,
        "versions": {},
        "diff": None,
        "q": "",
        "hits": 0,
    }
    if person:
        tree = tree_of(request)
        nodes = await tree.nodes(person)
        if "root" in nodes:
            hits, path = search(nodes, request.query.get("q", "").strip())
            data["q"] = request.query.get("q", "").strip()
            data["hits"] = len(hits)
            data["root"] = _node(nodes["root"], nodes, hits, path)
            data["versions"] = await tree.versions_of(
                person, [k for k, n in nodes.items() if n.level > 0]
            )
            key = request.query.get("diff", "")
            if key in data["versions"]:
                data["diff"] = version_diff(
                    key,
                    data["versions"][key],
                    query_int(request.query, "a", 0, lo=0, hi=2**31),
                    query_int(request.query, "b", 0, lo=0, hi=2**31),
                )
    return data


def search(nodes: dict[str, NodeView], text: str) -> tuple[set[str], set[str]]:
    """The nodes whose summary holds every word of ``text`` (case-insensitive), and the
    nodes on their paths to the root (a leaf in two clusters has two paths)."""
    words = text.lower().split()
    if not words:
        return set(), set()
    hits = {k for k, n in nodes.items() if all(w in n.summary.lower() for w in words)}
    path: set[str] = set()
    todo = [p for k in hits for p in nodes[k].parent_keys]
    while todo:
        key = todo.pop()
        if key in path or key not in nodes:
            continue
        path.add(key)
        todo.extend(nodes[key].parent_keys)
    return hits, path


def version_diff(key: str, versions: list[dict[str, Any]], a: int, b: int) -> dict[str, Any]:
    """Version ``a`` against ``b`` of a node (the last two when not given), line by line."""
    by_number = {v["version"]: v for v in versions}
    if a not in by_number or b not in by_number:
        a, b = versions[-2]["version"] if len(versions) > 1 else 1, versions[-1]["version"]
    lines = difflib.unified_diff(
        by_number[a]["summary"].splitlines(),
        by_number[b]["summary"].splitlines(),
        f"v{a}",
        f"v{b}",
        lineterm="",
        n=1,
    )
    return {"key": key, "a": a, "b": b, "lines": list(lines)}


async def tree_page(request: web.Request) -> web.Response:
    return render(request, "tree.html", data=await tree_data(request))


async def tree_api(request: web.Request) -> web.Response:
    return web.json_response(await tree_data(request))


async def correct_api(request: web.Request) -> web.Response:
    body = await json_body(request)
    person, key, text = body.get("person_id"), body.get("key"), body.get("summary")
    if isinstance(person, str) and person.isdigit():
        person = int(person)
    if isinstance(person, bool) or not isinstance(person, int) or person <= 0:
        raise bad_request("person_id must be a person's id")
    if not isinstance(key, str) or not isinstance(text, str) or not text.strip():
        raise bad_request("key and a non-empty summary are needed")
    try:
        version = await tree_of(request).correct(person, key, text.strip())
    except KeyError as exc:
        raise not_found(str(exc)) from None
    return web.json_response({"key": key, "version": version}, status=201)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/tree", tree_page)
    app.router.add_get("/api/tree", tree_api)
    app.router.add_post("/api/tree/correct", correct_api)
