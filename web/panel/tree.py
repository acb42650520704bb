"""``/panel/tree``: a person's memory tree (issue 23) — root, topics, clusters and
leaves, collapsible, each node with its summary, members, dates, the model that
wrote it and its versions; a summary can be corrected by hand (a new version,
kept by later rebuilds)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from memory.tree.service import MemoryTree, NodeView
from web.panel.people import named_people
from web.panel.render import bad_request, gateway_of, json_body, not_found, query_int, render


def tree_of(request: web.Request) -> MemoryTree:
    memory = gateway_of(request).memory
    if memory is None:
        raise not_found("memory is off")
    return memory.tree


def _node(node: NodeView, nodes: dict[str, NodeView]) -> dict[str, Any]:
    return {
        "key": node.key,
        "level": node.level,
        "summary": node.summary,
        "model": node.model,
        "version": node.version,
        "members": node.item_ids,
        "first": node.first_at.date().isoformat() if node.first_at else "",
        "last": node.last_at.date().isoformat() if node.last_at else "",
        "children": [_node(nodes[k], nodes) for k in node.child_keys if k in nodes],
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
    }
    if person:
        tree = tree_of(request)
        nodes = await tree.nodes(person)
        if "root" in nodes:
            data["root"] = _node(nodes["root"], nodes)
            data["versions"] = {
                k: await tree.versions(person, k) for k, n in nodes.items() if n.level > 0
            }
    return data


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
