"""Recall: the pack's query path (``build_pack``) and its trace.

The measured hot path of every turn (see docs/DESIGN.md): one worker call
after the searches, statements built once; the trace is stored after the
pack is returned.

One layer of ``memory.service.MemoryService`` (see the "Memory modules" section
of docs/DESIGN.md): each layer uses only the state and the layers below it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta, tzinfo

import numpy as np
from numpy.typing import NDArray

from gateway.clock import local, local_day
from gateway.errors import StoreError
from gateway.tokens import estimate_tokens
from gateway.usage import charge_embedding
from memory import repo
from memory.index import PersonIndex
from memory.models import MemoryTrace
from memory.pack import CHARS_PER_TOKEN, FOOTER, HEADER, search_text, select
from memory.pack_types import Candidate, MemoryView, PackResult, PackSettings
from memory.state import (
    ANCHOR_SPAN,
    Pack,
    PackRequest,
    day_bounds,
)
from memory.timeparse import TimeWindow, find_anchor, resolve_window
from memory.tree.pack import THEME_SHARE, BroadPack, Mode, broad_pack, classify, thematic_pack
from memory.writes import Writes

# The service's one logger name, as before the split (log configs and tests name it).
log = logging.getLogger("memory.service")


class Recall(Writes):
    async def build_pack(self, request: PackRequest) -> Pack:
        """Candidates, score, MMR, quotas and budget, render; the trace stored with the turn."""
        with self.packs.pack():
            return await self._build_pack(request)

    async def _build_pack(self, request: PackRequest) -> Pack:
        started = time.perf_counter()
        timings: dict[str, float] = {}
        zone = await self.zones.of(request.person_id)
        window = resolve_window(request.text, local(request.at, zone))
        searched = request.text
        if self.config.strip_speaker_names:
            searched = search_text(request.text, await self.speakers(request.person_id))

        # Without vectors of this model for all their items yet, none are used at all.
        dense = self.dense_for(request.person_id)
        if not dense:
            self._embed_next(request.person_id)
        # A tight budget skips the query's embedding and the ANN search (gateway/budget.py).
        dense = dense and request.dense
        settings = self.settings
        if request.budget_tokens is not None:
            settings = replace(settings, budget_tokens=request.budget_tokens)
        index = await self.index(request.person_id)
        lexical = await self.lexical(request.person_id)

        # The query's embedding and ANN search (a worker thread) overlap the full-text
        # and the store's searches, and the reading of what they found (a reader thread).
        (query, ann), found_sources = await asyncio.gather(
            self._query_and_ann(searched, index, started, timings, dense=dense),
            repo.pack_sources(
                self.store, self._source_query(request, searched, window, zone), lexical
            ),
        )
        if not found_sources.lexical_first:
            self._lexical_joined.add(request.person_id)
        if window is None:
            window = await self._anchor_window(request, zone)
            if window is not None:
                start, end = day_bounds(window, zone)
                found_sources = replace(
                    found_sources,
                    window=await repo.window_ids(
                        self.store,
                        request.person_id,
                        start,
                        end,
                        (window.start, window.end),
                        self.config.time_window_max,
                    ),
                )
        timings["search_ms"] = (time.perf_counter() - started) * 1000
        sources: dict[int, set[str]] = {}
        for name, ids in (
            ("ann", [i for i, _ in ann]),
            ("fts", [i for i, _ in found_sources.lexical]),
            ("pinned", found_sources.pinned),
            ("topic", found_sources.topic),
            ("time", found_sources.window),
        ):
            for item_id in ids:
                sources.setdefault(item_id, set()).add(name)
        lexical_of = dict(found_sources.lexical)
        # The tree (memory/tree/pack.py): the query's level, and for a thematic one the
        # nearest clusters, whose lines take a share of the budget before the flat pack.
        mode: Mode | None = None
        theme: BroadPack | None = None
        broad: BroadPack | None = None
        themed: frozenset[int] = frozenset()
        if self.config.tree and self.tree.packing:
            mode, theme = await self._tree_mode(request, query, ann, settings)
            if theme is not None:
                themed = frozenset(theme.credited)
                spent = estimate_tokens("\n".join(theme.lines) + "\n")
                settings = replace(settings, budget_tokens=max(1, settings.budget_tokens - spent))
            if mode.name == "broad":
                broad = await self._broad(request, settings)
        # What the searches found, and how much of it the recent history already holds
        # (the trace says why a pack is empty).
        found = {"items": 0, "in_history": 0}

        def assemble_and_select(fetched: repo.Fetched) -> PackResult:
            candidates = {
                item_id: self._candidate(
                    view,
                    vector if dense else None,
                    sources.get(item_id, {"neighbour"}),
                    lexical_of,
                    query,
                )
                for item_id, (view, vector) in fetched.rows.items()
                if request.exclude_message_ids.isdisjoint(view.source_message_ids)
                # A turn the theme's lines already quote is not packed twice.
                and item_id not in themed
            }
            found["items"] = len(fetched.rows)
            found["in_history"] = len(fetched.rows) - len(candidates)
            self._link_neighbours(candidates, fetched.links)
            timings["candidates_ms"] = (time.perf_counter() - started) * 1000
            return select(
                list(candidates.values()),
                replace(settings, zone=zone),
                query=request.text,
                now=request.at,
                window=window,
                notes=request.notes,
            )

        tree_notes: dict[str, object] = {}
        if mode is not None and broad is not None:
            # The tree's pack replaces the flat one whole: it is not selected at all (a
            # broad pack cost the flat pack and the tree's walk both).
            result = _broad_result(request, broad)
            tree_notes = {"tree": {"mode": mode.name, "why": mode.why, "path": broad.path}}
        else:
            # What is left to read, the candidates and the pack, in one call to a worker
            # thread: no hop back to the loop between them.
            result = await repo.fetch_more_then(
                self.store,
                found_sources.fetched,
                sources,
                self._best_hits(ann, found_sources.lexical),
                assemble_and_select,
            )
            if mode is not None:
                result, tree_notes = _tree_pack(result, mode, theme)
        timings["pack_ms"] = (time.perf_counter() - started) * 1000
        if self.config.store_traces:
            self._save_trace(
                MemoryTrace(
                    turn_id=request.turn_id,
                    person_id=request.person_id,
                    query=request.text,
                    budget_tokens=settings.budget_tokens,
                    used_tokens=result.tokens,
                    time_window=None if window is None else window.as_dict(),
                    kept_ids=list(result.kept),
                    filtered=list(result.filtered),
                    notes={
                        "dense": dense,
                        # Searched without vectors while theirs are redone.
                        "reembedding": self.dense and not self.dense_for(request.person_id),
                        "budget_mode": request.budget_mode,
                        "searched": searched,
                        "notes": list(request.notes),
                        "found": found["items"],
                        "in_history": found["in_history"],
                        "timings_ms": {k: round(v, 2) for k, v in timings.items()},
                        **tree_notes,
                    },
                ),
                result,
            )
        return Pack(result.text, result.tokens, result.kept, result, window, timings)

    async def _tree_mode(
        self,
        request: PackRequest,
        query: NDArray[np.float32] | None,
        ann: list[tuple[int, float]],
        settings: PackSettings,
    ) -> tuple[Mode, BroadPack | None]:
        """The query's level, and a thematic query's cluster lines (or None)."""
        names = await self.speakers(request.person_id)
        mode = classify(request.text, names, [s for _, s in ann])
        if mode.name != "thematic" or query is None:
            return mode, None
        nodes = await self.tree.nodes(request.person_id)
        named = {n for n in names if re.search(rf"\b{re.escape(n)}\b", request.text, re.I)}
        budget = int(settings.budget_tokens * CHARS_PER_TOKEN * THEME_SHARE)
        theme = await asyncio.to_thread(thematic_pack, nodes, query, named, budget)
        return mode, theme

    async def _broad(self, request: PackRequest, settings: PackSettings) -> BroadPack | None:
        """A broad question's pack from the tree: root, topics, leaves (None: no tree
        yet, or no line of the named speakers)."""
        names = await self.speakers(request.person_id)
        nodes = await self.tree.nodes(request.person_id)
        named = {n for n in names if re.search(rf"\b{re.escape(n)}\b", request.text, re.I)}
        frame = len(HEADER) + len(FOOTER) + 1
        budget = settings.budget_tokens * CHARS_PER_TOKEN - frame
        notes_text = "".join(f"{n}\n" for n in request.notes)
        broad = broad_pack(nodes, named, budget - len(notes_text))
        return broad if broad is not None and broad.lines else None

    async def _query_and_ann(
        self,
        searched: str,
        index: PersonIndex | None,
        started: float,
        timings: dict[str, float],
        *,
        dense: bool,
    ) -> tuple[NDArray[np.float32] | None, list[tuple[int, float]]]:
        """The query vector and its nearest items (none when not ``dense``)."""
        embedder, n = self.embedder, self.config.candidates
        if embedder is None or not dense:
            return None, []
        queries = self._query_embeds
        if queries is not None and getattr(embedder, "query_runtime", "") == "onnx":
            # ONNX Runtime takes concurrent calls: the queries' own queue, beside the
            # memory's, so that queries of concurrent turns share one model call.
            embedded = 0.0

            def search(vectors: NDArray[np.float32]) -> list[tuple[int, float]]:
                # In the embedding's worker thread: no hop to the loop and out again.
                nonlocal embedded
                embedded = time.perf_counter()
                return [] if index is None else index.search(vectors[0], n)

            embedding = time.perf_counter()
            queried, ann = await queries.embed_then([searched], search)
            charge_embedding(1, embedded - embedding)
            timings["embed_ms"] = (embedded - started) * 1000
            return queried[0], ann
        vectors = await self._embed([searched])
        timings["embed_ms"] = (time.perf_counter() - started) * 1000
        if vectors is None:
            return None, []
        if index is None:
            return vectors[0], []
        return vectors[0], await asyncio.to_thread(index.search, vectors[0], n)

    def _save_trace(self, trace: MemoryTrace, result: PackResult) -> None:
        """Store the trace beside the reply, not before it: the reply needs only the pack.

        The candidates' entries are built in the store's writer thread, where
        they are serialised. ``reinforce`` (after the turn) and ``aclose`` wait
        for it; ``traces_saved`` waits for every trace begun so far (the panel
        reads them later).
        """

        def fill_candidates(unsaved: MemoryTrace) -> None:
            unsaved.candidates = list(result.trace)

        task = asyncio.create_task(self._write_trace(trace, fill_candidates), name="memory-trace")
        self._trace_writes.add(task)
        task.add_done_callback(self._trace_writes.discard)
        if trace.turn_id is not None:
            self._trace_of_turn[trace.turn_id] = task
            task.add_done_callback(lambda done: self._forget_trace(trace.turn_id, done))

    def _forget_trace(self, turn_id: int | None, task: asyncio.Task[int | None]) -> None:
        # Only its own entry: a second pack of the same turn may have replaced it.
        if turn_id is not None and self._trace_of_turn.get(turn_id) is task:
            del self._trace_of_turn[turn_id]

    async def _write_trace(
        self, trace: MemoryTrace, complete: Callable[[MemoryTrace], None]
    ) -> int | None:
        try:
            return await repo.save_trace(self.store, trace, complete)
        except StoreError:
            # A lost trace loses the explanation and the turn's reinforcement, never the reply.
            log.exception("memory: could not store the trace of turn %s", trace.turn_id)
            return None

    async def traces_saved(self, turn_id: int | None = None) -> None:
        """Wait until the traces begun so far (or that of ``turn_id``) are stored."""
        if turn_id is not None:
            task = self._trace_of_turn.get(turn_id)
            pending = [task] if task is not None else []
        else:
            pending = list(self._trace_writes)
        if pending:
            await asyncio.gather(*pending)

    def _source_query(
        self, request: PackRequest, searched: str, window: TimeWindow | None, zone: tzinfo
    ) -> repo.SourceQuery:
        bounds = None
        if window is not None:
            start, end = day_bounds(window, zone)
            bounds = (start, end, window.start, window.end)
        return repo.SourceQuery(
            person_id=request.person_id,
            message=searched,
            limit=self.config.candidates,
            pinned_max=self.config.pinned_max,
            topic_since=request.at - timedelta(seconds=self.config.topic_window_s),
            topic_max=self.config.topic_max,
            window=bounds,
            window_max=self.config.time_window_max,
            lexical_first=request.person_id not in self._lexical_joined,
        )

    def _best_hits(
        self, ann: Sequence[tuple[int, float]], lexical: Sequence[tuple[int, float]]
    ) -> list[int]:
        """The best hits by a quick fusion of both searches: their neighbours join the pack."""
        if self.config.neighbour_hits <= 0:
            return []
        best_lexical = max((score for _, score in lexical), default=0.0) or 1.0
        quick: dict[int, float] = {}
        for item_id, cosine in ann:
            quick[item_id] = cosine
        for item_id, score in lexical:
            # Full text counts whole here: its hits have no cosine before they are fetched.
            quick[item_id] = quick.get(item_id, 0.0) + score / best_lexical
        ranked = sorted(quick, key=lambda i: (-quick[i], i))
        return ranked[: self.config.neighbour_hits]

    def _candidate(
        self,
        view: MemoryView,
        vector: NDArray[np.float32] | None,
        sources: set[str],
        lexical: dict[int, float],
        query: NDArray[np.float32] | None,
    ) -> Candidate:
        dense = None if vector is None or query is None else float(vector @ query)
        return Candidate(view, vector, set(sources), dense, lexical.get(view.id, 0.0))

    async def _anchor_window(self, request: PackRequest, zone: tzinfo) -> TimeWindow | None:
        """ "before the trip": a window on one side of when the trip was talked about."""
        anchor = find_anchor(request.text)
        if anchor is None:
            return None
        hits = await self._full_text(request.person_id, anchor.event, 1)
        if not hits:
            return None
        found = await repo.fetch(self.store, [hits[0][0]])
        if not found:
            return None
        when = local_day(found[hits[0][0]][0].occurred_at, zone)
        if anchor.relation == "before":
            return TimeWindow(when - ANCHOR_SPAN, when, anchor.phrase)
        return TimeWindow(when, when + ANCHOR_SPAN, anchor.phrase)

    def _link_neighbours(
        self,
        candidates: dict[int, Candidate],
        links: dict[int, tuple[int | None, int | None]],
    ) -> None:
        """Adjacent messages close in time point at each other, for neighbour relevance."""
        gap = self.config.neighbour_gap_s
        for item_id, (prev_id, next_id) in links.items():
            me = candidates.get(item_id)
            if me is None:
                continue
            for other_id, before in ((prev_id, True), (next_id, False)):
                other = candidates.get(other_id) if other_id is not None else None
                if other is None:
                    continue
                seconds = abs((other.item.occurred_at - me.item.occurred_at).total_seconds())
                if seconds > gap:
                    continue
                if before:
                    me.prev_id, other.next_id = other.item.id, me.item.id
                else:
                    me.next_id, other.prev_id = other.item.id, me.item.id


def _tree_pack(
    result: PackResult, mode: Mode, theme: BroadPack | None
) -> tuple[PackResult, dict[str, object]]:
    """The flat pack under a thematic query's theme lines (memory/tree/pack.py), or as it
    is; the mode and the path taken in the trace."""
    notes: dict[str, object] = {"tree": {"mode": mode.name, "why": mode.why}}
    if theme is None:
        return result, notes
    # An empty flat pack renders nothing: the theme's lines get the frame alone.
    body = result.text.removeprefix(HEADER) if result.text else FOOTER
    text = HEADER + "\n".join(theme.lines) + "\n" + body
    notes["tree"] = {"mode": mode.name, "why": mode.why, "path": theme.path}
    kept = tuple(dict.fromkeys([*theme.credited, *result.kept]))
    return replace(result, text=text, tokens=estimate_tokens(text), kept=kept), notes


def _broad_result(request: PackRequest, broad: BroadPack) -> PackResult:
    """A broad question's pack: the tree's lines in the frame, the turns they quote kept;
    no candidate was scored (the trace lists none)."""
    notes_text = "".join(f"{n}\n" for n in request.notes)
    text = HEADER + notes_text + "\n".join(broad.lines) + "\n" + FOOTER
    return PackResult(
        text=text,
        tokens=estimate_tokens(text),
        kept=tuple(broad.credited),
        filtered=(),
        explain=tuple,
    )
