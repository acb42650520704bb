"""Re-embedding: giving a store's items vectors of a new model in the background.

Until a person's are done, their packs search without vectors, as vectors of
two models never meet in one index, MMR or score.

One layer of ``memory.service.MemoryService`` (see the "Memory modules" section
of docs/DESIGN.md): each layer uses only the state and the layers below it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from gateway.errors import StoreError
from memory import repo
from memory.embed import Embedder
from memory.errors import EmbeddingUnavailable, IndexUnavailable
from memory.indexes import Indexes
from memory.state import (
    BACKFILL_REPORT,
    embedding_text,
)

# The service's one logger name, as before the split (log configs and tests name it).
log = logging.getLogger("memory.service")


class Reembedding(Indexes):
    async def begin_reembedding(self, batch: int = 64) -> None:
        """Give vectors of this model to the active items that lack them, in the
        background, person by person.

        They were stored while no embedder was loaded, or embedded by the model
        configured before (``memory.embedding_model`` changed): the store keeps each
        vector's model. A new model over a big store takes minutes (~200 items a
        second here), and the gateway answers meanwhile: a person's packs search
        full text, pinned, topic and time until their items are done, then by vector
        again. Vectors of items not recallable (superseded, forgotten) stay until a
        restore needs them (``vector_of``). Batches are small so that a turn's own
        embedding waits for one at most.
        """
        embedder = self.embedder
        if embedder is None or (self._reembed_task is not None and not self._reembed_task.done()):
            return
        people = await repo.people_with_stale_vectors(self.store, embedder.model_name, embedder.dim)
        if not people:
            return
        self._reembedding.update(people)
        self._reembed_queue = list(people)
        log.info(
            "memory: giving vectors of %s to the items of %d people in the background; "
            "their recall searches full text until then",
            embedder.model_name,
            len(people),
        )
        self._reembed_task = asyncio.create_task(self._reembed(batch), name="memory-reembed")

    async def reembedded(self) -> int:
        """Wait for the background embedding (if any) to end; how many items it embedded."""
        if self._reembed_task is not None:
            await asyncio.shield(self._reembed_task)
        return self.reembedded_items

    async def backfill(self, batch: int = 256) -> int:
        """``begin_reembedding`` and wait for it: how many items it embedded."""
        before = self.reembedded_items
        await self.begin_reembedding(batch)
        return await self.reembedded() - before

    def _embed_next(self, person_id: int) -> None:
        """The person is writing: their items are embedded next."""
        if person_id in self._reembed_queue:
            self._reembed_queue.remove(person_id)
            self._reembed_queue.insert(0, person_id)

    async def _reembed(self, batch: int) -> int:
        embedder = self.embedder
        if embedder is None:
            return 0
        report_at = self.reembedded_items + BACKFILL_REPORT
        while self._reembed_queue:
            person_id = self._reembed_queue.pop(0)
            try:
                async for count in self._embed_stale(person_id, embedder, batch):
                    self.reembedded_items += count
                    if self.reembedded_items >= report_at:
                        log.info(
                            "memory: %d items embedded so far, %d people left",
                            self.reembedded_items,
                            len(self._reembedding),
                        )
                        report_at += BACKFILL_REPORT
            except (EmbeddingUnavailable, StoreError):
                # They stay on full text; the next start tries again.
                log.exception("memory: could not embed the items of person %d", person_id)
                continue
            # Their index is rebuilt before their packs use vectors again, so none waits
            # for it (at 100,000 items a rebuild takes a while). What was stored or
            # retired meanwhile did not reach it: it is caught up once they are back.
            try:
                index = await self._open_index(person_id, embedder)
                self._reembedding.discard(person_id)
                await self._fill_index(index, person_id, index.keep_only)
            except (IndexUnavailable, EmbeddingUnavailable, StoreError):
                # Their next pack opens the index as any first pack does.
                log.exception("memory: could not build the index of person %d", person_id)
            finally:
                self._reembedding.discard(person_id)
        log.info("memory: %d items have vectors of this model now", self.reembedded_items)
        return self.reembedded_items

    async def _embed_stale(
        self, person_id: int, embedder: Embedder, batch: int
    ) -> AsyncIterator[int]:
        """Embed the person's active items that have no vector of ``embedder``'s model,
        by id; yields each batch's count."""
        model, dim = embedder.model_name, embedder.dim
        after = 0
        while True:
            rows = await repo.stale_vectors(self.store, person_id, model, dim, after, batch)
            if not rows and after:
                # Once more from the start: an item restored behind the pass kept its old vector.
                after = 0
                continue
            if not rows:
                return
            matrix = await self._embed([embedding_text(t, s, c) for _, c, s, t in rows])
            if matrix is None:
                return
            ids = [r[0] for r in rows]
            await repo.set_vectors(self.store, ids, matrix, model)
            after = ids[-1]
            yield len(ids)
