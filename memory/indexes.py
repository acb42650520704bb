"""Each person's two search indexes: the ANN index of vectors and the BM25 index.

Opening (load, catch up or rebuild), changes as items stop or start being
recallable, the cache's eviction hooks, saving; and the vectors of this
model the ANN index is filled from.

One layer of ``memory.service.MemoryService`` (see the "Memory modules" section
of docs/DESIGN.md): each layer uses only the state and the layers below it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from gateway.errors import StoreError
from gateway.heap import freeze_long_lived
from gateway.usage import charge_embedding
from memory import repo
from memory.embed import Embedder
from memory.errors import EmbeddingUnavailable, IndexUnavailable
from memory.index import IndexParams, PersonIndex
from memory.lexical import LexicalIndex, LexicalUnreadable
from memory.state import (
    ChangeOp,
    ServiceState,
    embedding_text,
)

# The service's one logger name, as before the split (log configs and tests name it).
log = logging.getLogger("memory.service")


class Indexes(ServiceState):
    async def index(self, person_id: int) -> PersonIndex | None:
        """The person's ANN index, opened (loaded, updated or rebuilt) on first use; None
        without an embedder or while their items are given vectors of this model."""
        embedder = self.embedder
        if embedder is None or person_id in self._reembedding:
            return None
        index = self._indexes.get(person_id) or await self._open_index(person_id, embedder)
        self._used(person_id)
        return index

    async def _open_index(self, person_id: int, embedder: Embedder) -> PersonIndex:
        lock = self._opening.setdefault(person_id, asyncio.Lock())
        async with lock:
            found = self._indexes.get(person_id)
            if found is not None:
                return found
            # Evicted a moment ago: load what that save writes, not a file it replaces.
            await self._evictions.wait(person_id)
            params = IndexParams(
                dim=embedder.dim,
                m=self.config.index_m,
                ef_construction=self.config.index_ef_construction,
                ef_search=self.config.index_ef_search,
                model=embedder.model_name,
                store=self.store.identity,
            )
            index = PersonIndex(self.index_dir, person_id, params)
            await self._fill_index(index, person_id, index.open)
            if index.origin != "loaded":
                await asyncio.to_thread(index.save)
            log.info(
                "memory index of person %d: %s, %d items", person_id, index.origin, index.count
            )
            self._indexes[person_id] = index
            self._used(person_id)
            return index

    async def rebuild_index(self, person_id: int, chunk: int = 5000) -> tuple[int, int] | None:
        """Build the person's ANN index anew from the stored vectors (no re-embedding),
        which drops the slots of deleted items, and put it in place of the old one;
        (items, slots dropped), or None without an embedder or while theirs are redone.

        Packs go on using the old index meanwhile; what changes while the new one is
        filled is caught up once it is in place.
        """
        embedder = self.embedder
        if embedder is None or person_id in self._reembedding:
            return None
        lock = self._opening.setdefault(person_id, asyncio.Lock())
        async with lock:
            await self._evictions.wait(person_id)
            old = self._indexes.get(person_id)
            params = IndexParams(
                dim=embedder.dim,
                m=self.config.index_m,
                ef_construction=self.config.index_ef_construction,
                ef_search=self.config.index_ef_search,
                model=embedder.model_name,
                store=self.store.identity,
            )
            fresh = PersonIndex(self.index_dir, person_id, params)
            dropped = (
                old.deleted_slots
                if old is not None
                else await asyncio.to_thread(fresh.saved_deleted_slots)
            )
            ids = await repo.indexable_ids(self.store, person_id)
            fresh.start_afresh(len(ids), "monthly re-index")
            for start in range(0, len(ids), chunk):
                part = ids[start : start + chunk]
                matrix = await self._current_vectors(part)
                await asyncio.to_thread(fresh.add, part, matrix)
            self._indexes[person_id] = fresh
        await self._fill_index(fresh, person_id, fresh.keep_only)
        await asyncio.to_thread(fresh.save)
        self._used(person_id)
        return fresh.count, dropped

    async def _fill_index(
        self, index: PersonIndex, person_id: int, keep: Callable[[list[int]], list[int]]
    ) -> None:
        """``keep`` the person's indexable ids in ``index`` (it returns those it lacks),
        and add those with their vectors."""
        ids = await repo.indexable_ids(self.store, person_id)
        missing = await asyncio.to_thread(keep, ids)
        if missing:
            matrix = await self._current_vectors(missing)
            await asyncio.to_thread(index.add, missing, matrix)

    async def lexical(self, person_id: int, *, wait: bool = False) -> LexicalIndex | None:
        """The person's in-memory full-text index; None while it is being built (its
        first use starts the build) unless ``wait``. Without FTS5 (PostgreSQL) there
        is nothing else to search, so the first pack always waits."""
        found = self._lexical.get(person_id)
        if found is not None:
            self._used(person_id)
            return found
        task = self._lexical_builds.get(person_id)
        if task is None:
            self._lexical_pending[person_id] = []
            task = asyncio.create_task(
                self._build_lexical(person_id), name=f"memory-lexical-{person_id}"
            )
            self._lexical_builds[person_id] = task
            task.add_done_callback(lambda done: self._lexical_built(person_id, done))
        if wait or not self.store.is_sqlite:
            return await asyncio.shield(task)
        return None

    def _lexical_built(self, person_id: int, task: asyncio.Task[LexicalIndex]) -> None:
        if self._lexical_builds.get(person_id) is task:
            del self._lexical_builds[person_id]
            # A build that failed leaves no index for them: the next one reads anew.
            self._lexical_pending.pop(person_id, None)
        if not task.cancelled() and task.exception() is not None:
            # The next pack tries again; until then full text comes from FTS5.
            log.error("memory: full-text index of person %d: %s", person_id, task.exception())

    def _lexical_path(self, person_id: int) -> Path:
        return self.index_dir / f"person-{person_id}.lexical.npz"

    async def _build_lexical(self, person_id: int, chunk: int = 5000) -> LexicalIndex:
        """Load the saved index and bring it up to date, or build it from the store."""
        started = time.perf_counter()
        path = self._lexical_path(person_id)
        index: LexicalIndex | None = None
        # Evicted a moment ago: load what that save writes.
        await self._evictions.wait(person_id)
        try:
            index = await asyncio.to_thread(
                LexicalIndex.load, path, self._tokenizer, self.store.identity
            )
        except LexicalUnreadable as exc:
            if path.exists():
                log.warning("memory: full-text index of person %d: %s; rebuilt", person_id, exc)
        if index is not None:
            origin = "loaded"
            last = await self._catch_up_lexical(index, person_id, chunk)
        else:
            origin = "built"
            index = LexicalIndex(self._tokenizer)
            last = await self._fill_lexical(index, person_id, 0, chunk)
        self._lexical[person_id] = index
        try:
            # Items stored meanwhile: read here, or added by add_items now that the
            # index is registered (adding one twice is harmless).
            await self._fill_lexical(index, person_id, last, chunk)
            # Items retired or restored meanwhile: the reads above may have come before
            # them. Changes made while these are applied join the queue, so the order
            # holds.
            while pending := self._lexical_pending.get(person_id):
                self._lexical_pending[person_id] = []
                for restore, ids in pending:
                    await self._change_lexical(index, ids, restore=restore)
        except BaseException:
            # The queue goes with the failed build, so the index may lack changes it
            # held: searches go back to FTS5 and the next build reads the store anew.
            if self._lexical.get(person_id) is index:
                del self._lexical[person_id]
                self._used(person_id)  # its size leaves the cache's total
            raise
        self._lexical_pending.pop(person_id, None)
        self._used(person_id)
        await asyncio.to_thread(index.compact)
        if index.dirty or origin == "built":
            await self._save_lexical(person_id, index)
        freeze_long_lived(f"full-text index of person {person_id} {origin}")
        log.info(
            "memory: full-text index of person %d: %s, %d items in %.1f s",
            person_id,
            origin,
            index.count,
            time.perf_counter() - started,
        )
        return index

    async def _catch_up_lexical(self, index: LexicalIndex, person_id: int, chunk: int) -> int:
        """Bring a loaded index to what the store holds now; the highest id then."""
        stored, newest = await repo.recallable_ids(self.store, person_id)
        held = await asyncio.to_thread(index.live_ids)
        gone = held - stored
        if gone:
            await asyncio.to_thread(index.discard, gone)
        missing = sorted(stored - held)
        for start in range(0, len(missing), chunk):
            rows = await repo.lexical_rows_of(self.store, missing[start : start + chunk])
            await asyncio.to_thread(index.add, rows)
        return newest

    async def _save_lexical(self, person_id: int, index: LexicalIndex) -> None:
        # A lost save costs the next start a build, never a search.
        try:
            await asyncio.to_thread(index.save, self._lexical_path(person_id), self.store.identity)
        except OSError:
            log.exception("memory: could not save the full-text index of person %d", person_id)

    async def _fill_lexical(
        self, index: LexicalIndex, person_id: int, after: int, chunk: int
    ) -> int:
        while rows := await repo.lexical_rows(self.store, person_id, after, chunk):
            await asyncio.to_thread(index.add, rows)
            after = rows[-1][0]
        return after

    async def unrecall(self, person_id: int, ids: Sequence[int]) -> None:
        """Items that stopped being recallable (superseded, forgotten, deleted) leave
        both indexes; archived ones only leave the ANN index (``_unindex``)."""
        await self._unindex(person_id, ids)
        await self._lexical_changed(person_id, ids, restore=False)
        await self._published("drop", person_id, ids)

    async def recall_again(self, person_id: int, ids: Sequence[int]) -> None:
        """Items restored to active: back into the full-text index (the ANN index is
        the caller's, which has their vectors)."""
        await self._lexical_changed(person_id, ids, restore=True)
        await self._published("restore", person_id, ids)

    async def _published(self, op: ChangeOp, person_id: int, ids: Sequence[int]) -> None:
        """Tells the cluster's other gateways (memory/feed.py); a failure costs them
        time, not correctness: they catch up at their next reconnection or open."""
        if self.publish is None or not ids:
            return
        try:
            await self.publish(op, person_id, ids)
        except StoreError:
            log.exception("memory: could not tell the cluster of a change (%s)", op)

    async def _lexical_changed(self, person_id: int, ids: Sequence[int], *, restore: bool) -> None:
        if not ids:
            return
        pending = self._lexical_pending.get(person_id)
        if pending is not None:
            pending.append((restore, list(ids)))
            return
        lexical = self._lexical.get(person_id)
        if lexical is not None:
            await self._change_lexical(lexical, ids, restore=restore)

    async def _change_lexical(
        self, index: LexicalIndex, ids: Sequence[int], *, restore: bool
    ) -> None:
        if restore:
            rows = await repo.lexical_rows_of(self.store, ids)
            await asyncio.to_thread(index.add, rows)
        else:
            await asyncio.to_thread(index.discard, ids)

    async def _maybe_save(self, index: PersonIndex) -> None:
        # Saving writes the whole file: waiting for a share of the index keeps bulk
        # ingest linear. Unsaved changes are safe: the store has every vector, and
        # opening the index adds what its file lacks.
        if self._indexes.get(index.person_id) is not index:
            # Evicted meanwhile: its eviction saves it, and a save from here could land
            # after the reopened index's own.
            return
        if index.dirty >= max(self.config.index_save_every, index.count // 4):
            await asyncio.to_thread(index.save)

    def _used(self, person_id: int) -> None:
        """The person's indexes were used or grew: they go last in the cache, and the
        people used longest ago are evicted while the cache is over its budget."""
        ann, lexical = self._indexes.get(person_id), self._lexical.get(person_id)
        if ann is None and lexical is None:
            # Evicted while it was being added to: it is reopened at its next use.
            self.index_cache.forget(person_id)
            return
        size = (ann.nbytes if ann is not None else 0) + (lexical.nbytes if lexical else 0)
        for other in self.index_cache.use(person_id, size, self._busy):
            self._evict(other)

    def _busy(self, person_id: int) -> bool:
        """Whether an index of the person is being opened or built (not evicted then)."""
        opening = self._opening.get(person_id)
        return person_id in self._lexical_builds or (opening is not None and opening.locked())

    def _evict(self, person_id: int) -> None:
        ann, lexical = self._indexes.pop(person_id, None), self._lexical.pop(person_id, None)
        self._evictions.start(person_id, ann, lexical, self._lexical_path(person_id))
        log.debug("memory: the indexes of person %d leave memory (least recently used)", person_id)

    async def save_indexes(self) -> None:
        # Only those still held when their turn comes: an evicted one is its
        # eviction's to save (memory/index_cache.py).
        for person_id, index in list(self._indexes.items()):
            if index.dirty and self._indexes.get(person_id) is index:
                try:
                    await asyncio.to_thread(index.save)
                except IndexUnavailable:
                    log.exception("memory: could not save %s", index.path.name)
        for person_id, lexical in list(self._lexical.items()):
            if lexical.dirty and self._lexical.get(person_id) is lexical:
                await self._save_lexical(person_id, lexical)

    async def _embed(self, texts: Sequence[str]) -> NDArray[np.float32] | None:
        if self._embeds is None or not texts:
            return None
        started = time.perf_counter()
        try:
            return await self._embeds.embed(list(texts))
        finally:
            # Counted for the turn it serves (none outside a turn): gateway/usage.py.
            charge_embedding(len(texts), time.perf_counter() - started)

    async def speakers(self, person_id: int) -> set[str]:
        """The first names of who speaks in the person's conversations (loaded once)."""
        found = self._speakers.get(person_id)
        if found is None:
            found = set(await repo.speaker_names(self.store, person_id))
            self._speakers[person_id] = found
        return found

    async def _current_vectors(self, ids: Sequence[int]) -> NDArray[np.float32]:
        """Vectors of this model for ``ids``, rows in the same order: the stored ones,
        and any missing or still of another model embedded now and stored (an item
        restored while its person's items were being embedded again)."""
        assert self.embedder is not None
        model, dim = self.embedder.model_name, self.embedder.dim
        stored = await repo.stored_vectors(self.store, ids)
        stale = [
            i
            for i in ids
            if i not in stored or stored[i][1] != model or stored[i][0].shape[0] != dim
        ]
        if stale:
            rows = {item.id: item for item in await repo.get_items(self.store, stale)}
            texts = [embedding_text(rows[i].type, rows[i].speaker, rows[i].content) for i in stale]
            matrix = await self._embed(texts)
            if matrix is None:
                raise EmbeddingUnavailable("no embedder for the items of another model")
            await repo.set_vectors(self.store, stale, matrix, model)
            stored.update({i: (matrix[n], model) for n, i in enumerate(stale)})
        return np.stack([stored[i][0] for i in ids]) if ids else np.zeros((0, dim), np.float32)

    async def unindex(self, person_id: int, ids: Sequence[int]) -> None:
        """Archived items leave the ANN index; full text keeps them (upkeep jobs)."""
        await self._unindex(person_id, ids)
        await self._published("unindex", person_id, ids)

    async def _unindex(self, person_id: int, ids: Sequence[int]) -> None:
        index = await self.index(person_id)
        if index is not None and ids:
            await asyncio.to_thread(index.delete, ids)
            await self._maybe_save(index)

    async def _full_text(
        self, person_id: int, message: str, limit: int, *, every: bool = False
    ) -> list[tuple[int, float]]:
        """The person's active items matching the message's content words (with
        ``every``, all of them), best BM25 first: FTS5 on SQLite; on other stores,
        which have no FTS5, the person's in-memory index (built at first use)."""
        if self.store.is_sqlite:
            expression = repo.fts_query(message, every=every)
            return await repo.fts_match(self.store, person_id, expression, limit)
        lexical = await self.lexical(person_id)
        if lexical is None:
            return []
        words = repo.content_terms(message)
        return await asyncio.to_thread(lexical.search, words, limit, every=every)

    async def _reindex(self, person_id: int, ids: Sequence[int]) -> None:
        index = await self.index(person_id)
        if index is None:
            return
        with_vectors = [
            i
            for i, (_, vector) in (await repo.fetch(self.store, ids)).items()
            if vector is not None
        ]
        if with_vectors:
            matrix = await self._current_vectors(with_vectors)
            await asyncio.to_thread(index.add, with_vectors, matrix)
            await self._maybe_save(index)
            await self._published("add", person_id, with_vectors)
