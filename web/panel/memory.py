"""``/panel/memory``: find, edit, pin, archive, restore and delete memory items;
their supersession chains; and, for any turn, the pack it got and why."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.store.models import Turn
from memory.curate import CurateError, ItemFilter, ItemNotFound, MemoryCurator
from memory.jobs import merge
from memory.models import MemoryItem, MemoryTrace
from memory.types import ItemStatus, ItemType, Tier, effective_priority
from web.panel.people import named_people, person_names
from web.panel.render import (
    bad_request,
    gateway_of,
    iso,
    json_body,
    not_found,
    path_int,
    person_zone,
    query_choice,
    query_int,
    render,
)
from web.panel.turns import timeline, turn_stages

PAGE_SIZE = 50
ACTIONS = ("archive", "restore", "pin", "unpin")


def curator(request: web.Request) -> MemoryCurator:
    gateway = gateway_of(request)
    memory = gateway.memory
    if memory is None and gateway.config.memory.enabled:
        # Built once the embedding model loaded (see gateway/app.py).
        raise web.HTTPServiceUnavailable(text="the memory layer is still loading; try again soon")
    if memory is None:
        raise web.HTTPServiceUnavailable(text="the memory layer is off (memory.enabled = false)")
    return MemoryCurator(memory)


def item_json(item: MemoryItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "person_id": item.person_id,
        "type": item.type.value,
        "content": item.content,
        "speaker": item.speaker,
        "role": item.role,
        "author": item.author,
        "channel": item.channel,
        "conversation_id": item.conversation_id,
        "source_message_ids": list(item.source_message_ids or ()),
        "source_ref": item.source_ref,
        "priority": item.priority,
        "effective_priority": effective_priority(item.type, item.priority),
        "confidence": item.confidence,
        "status": item.status.value,
        "tier": item.tier.value,
        "pinned": item.pinned,
        "strength": item.strength,
        "access_count": item.access_count,
        "created_at": iso(item.created_at),
        "occurred_at": iso(item.occurred_at),
        "last_accessed_at": iso(item.last_accessed_at),
        "refers_start": iso(item.refers_start),
        "refers_end": iso(item.refers_end),
        "superseded_by_id": item.superseded_by_id,
    }


def item_filter(query: Any) -> ItemFilter:
    person = query.get("person", "")
    pinned = query.get("pinned", "")
    return ItemFilter(
        text=query.get("q", "").strip()[:200],
        type=query_choice(query, "type", ItemType),
        tier=query_choice(query, "tier", Tier),
        status=query_choice(query, "status", ItemStatus),
        channel=query.get("channel", "").strip()[:32],
        person_id=query_int(query, "person", 0, lo=1, hi=2**62) if person else None,
        pinned=None if not pinned else pinned in ("1", "true", "yes"),
        offset=query_int(query, "offset", 0, lo=0, hi=10**9),
        limit=query_int(query, "limit", PAGE_SIZE, lo=1, hi=500),
    )


async def trace_json(cur: MemoryCurator, trace: MemoryTrace) -> dict[str, Any]:
    """The stored trace, each candidate with its item's content (as it is now)."""
    items = await cur.contents([int(c["id"]) for c in trace.candidates])
    candidates = []
    for c in trace.candidates:
        item = items.get(int(c["id"]))
        candidates.append(
            {
                **c,
                "content": None if item is None else item.content,
                "status": None if item is None else item.status.value,
            }
        )
    return {
        "trace_id": trace.id,
        "turn_id": trace.turn_id,
        "person_id": trace.person_id,
        "created_at": iso(trace.created_at),
        "query": trace.query,
        "budget_tokens": trace.budget_tokens,
        "used_tokens": trace.used_tokens,
        "time_window": trace.time_window,
        "kept_ids": trace.kept_ids,
        "filtered": trace.filtered,
        "notes": trace.notes,
        "candidates": candidates,
    }


# -- pages -----------------------------------------------------------------------


async def name_of(request: web.Request, person_id: int) -> str:
    async with gateway_of(request).store.reader() as session:
        return (await person_names(session, [person_id]))[person_id]


def page_url(request: web.Request, offset: int) -> str:
    return str(request.rel_url.update_query(offset=max(0, offset)))


async def memory_page(request: web.Request) -> web.Response:
    f = item_filter(request.query)
    cur = curator(request)
    items, total = await cur.find(f)
    async with gateway_of(request).store.reader() as session:
        people = await named_people(session)
        if f.person_id is not None and f.person_id not in dict(people):
            people.append((f.person_id, (await person_names(session, [f.person_id]))[f.person_id]))
    return render(
        request,
        "memory.html",
        items=items,
        total=total,
        people=people,
        # After a change of embedding model: who still waits for its vectors.
        reembedding=cur.memory.reembedding,
        model=cur.memory.embedder.model_name if cur.memory.embedder is not None else "",
        f=f,
        newer=page_url(request, f.offset - f.limit) if f.offset > 0 else None,
        older=page_url(request, f.offset + f.limit) if f.offset + f.limit < total else None,
        types=[t.value for t in ItemType],
        tiers=[t.value for t in Tier],
        statuses=[s.value for s in ItemStatus],
    )


async def merges_with(cur: MemoryCurator, item: MemoryItem) -> list[merge.MergeRecord]:
    """The nightly merges this item survived, or the one that superseded it; each is
    undone by its button."""
    found = (await merge.merges_of(cur.memory, [item.id])).get(item.id, [])
    if item.status is ItemStatus.SUPERSEDED and item.superseded_by_id is not None:
        into = await merge.merges_of(cur.memory, [item.superseded_by_id])
        found += [m for m in into.get(item.superseded_by_id, []) if item.id in m.merged_ids]
    return found


async def item_page(request: web.Request) -> web.Response:
    cur = curator(request)
    item_id = path_int(request, "item_id")
    try:
        chain = await cur.chain(item_id)
    except ItemNotFound as exc:
        raise web.HTTPNotFound(text=str(exc)) from None
    item = next(i for i in chain if i.id == item_id)
    return render(
        request,
        "memory_item.html",
        item=item,
        whose=await name_of(request, item.person_id),
        chain=chain,
        merges=await merges_with(cur, item),
        effective=effective_priority(item.type, item.priority),
        **await person_zone(request, item.person_id),
    )


async def pack_page(request: web.Request) -> web.Response:
    cur = curator(request)
    turn_id = path_int(request, "turn_id")
    trace = await cur.trace(turn_id)
    return render(
        request,
        "memory_pack.html",
        whose=None if trace is None else await name_of(request, trace.person_id),
        turn_id=turn_id,
        trace=None if trace is None else await trace_json(cur, trace),
        keep_days=cur.memory.config.trace_keep_days,
        timeline=timeline(await turn_stages(request, turn_id)),
    )


# -- JSON API ----------------------------------------------------------------------


async def list_items(request: web.Request) -> web.Response:
    f = item_filter(request.query)
    items, total = await curator(request).find(f)
    return web.json_response(
        {"total": total, "offset": f.offset, "items": [item_json(i) for i in items]}
    )


async def get_item(request: web.Request) -> web.Response:
    item_id = path_int(request, "item_id")
    try:
        chain = await curator(request).chain(item_id)
    except ItemNotFound as exc:
        raise not_found(str(exc)) from None
    item = next(i for i in chain if i.id == item_id)
    return web.json_response({**item_json(item), "chain": [item_json(i) for i in chain]})


async def patch_item(request: web.Request) -> web.Response:
    item_id = path_int(request, "item_id")
    body = await json_body(request)
    unknown = set(body) - {"content", "priority"}
    if unknown:
        raise bad_request(f"unknown fields: {', '.join(sorted(unknown))}")
    content = body.get("content")
    priority = body.get("priority")
    if content is not None and not isinstance(content, str):
        raise bad_request("content must be a string")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int | float)
    ):
        raise bad_request("priority must be a number from 0 to 1")
    try:
        item = await curator(request).edit(
            item_id, content=content, priority=None if priority is None else float(priority)
        )
    except ItemNotFound as exc:
        raise not_found(str(exc)) from None
    except CurateError as exc:
        raise bad_request(str(exc)) from None
    data = item_json(item)
    return web.json_response({**data, "redirect": f"/panel/memory/items/{item.id}"})


async def item_action(request: web.Request) -> web.Response:
    item_id = path_int(request, "item_id")
    action = request.match_info["action"]
    if action not in ACTIONS:
        raise not_found(f"no action {action!r}: use one of {', '.join(ACTIONS)}")
    cur = curator(request)
    try:
        if action == "archive":
            item = await cur.archive(item_id)
        elif action == "restore":
            item = await cur.restore(item_id)
        else:
            item = await cur.set_pinned(item_id, action == "pin")
    except ItemNotFound as exc:
        raise not_found(str(exc)) from None
    except CurateError as exc:
        raise bad_request(str(exc)) from None
    return web.json_response(item_json(item))


async def delete_item(request: web.Request) -> web.Response:
    item_id = path_int(request, "item_id")
    try:
        await curator(request).delete(item_id)
    except ItemNotFound as exc:
        raise not_found(str(exc)) from None
    return web.json_response({"deleted": item_id, "redirect": "/panel/memory"})


async def undo_merge(request: web.Request) -> web.Response:
    """Undo a nightly merge: the items it superseded are active again (issue 21)."""
    merge_id = path_int(request, "merge_id")
    try:
        record = await merge.unmerge(curator(request).memory, merge_id)
    except merge.MergeError as exc:
        raise bad_request(str(exc)) from None
    return web.json_response(
        {
            "merge_id": record.id,
            "survivor_id": record.survivor_id,
            "restored_ids": list(record.merged_ids),
            "redirect": f"/panel/memory/items/{record.survivor_id}",
        }
    )


async def turn_pack(request: web.Request) -> web.Response:
    cur = curator(request)
    turn_id = path_int(request, "turn_id")
    trace = await cur.trace(turn_id)
    if trace is None:
        raise not_found(f"no pack trace is stored for turn {turn_id}{_kept_for(cur)}")
    # The model's own look-ups (issue 24) beside the pack it was given.
    async with gateway_of(request).store.reader() as session:
        turn = await session.get(Turn, turn_id)
    tool_calls = [] if turn is None else turn.tool_calls or []
    return web.json_response({**await trace_json(cur, trace), "tool_calls": tool_calls})


def _kept_for(cur: MemoryCurator) -> str:
    days = cur.memory.config.trace_keep_days
    return f" (traces are kept {days:g} days: memory.trace_keep_days)" if days > 0 else ""


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/memory", memory_page)
    app.router.add_get("/panel/memory/items/{item_id}", item_page)
    app.router.add_get("/panel/memory/turns/{turn_id}", pack_page)
    app.router.add_get("/api/memory/items", list_items)
    app.router.add_get("/api/memory/items/{item_id}", get_item)
    app.router.add_patch("/api/memory/items/{item_id}", patch_item)
    app.router.add_delete("/api/memory/items/{item_id}", delete_item)
    app.router.add_post("/api/memory/items/{item_id}/{action}", item_action)
    app.router.add_get("/api/turns/{turn_id}/pack", turn_pack)
    app.router.add_post("/api/memory/merges/{merge_id}/undo", undo_merge)
