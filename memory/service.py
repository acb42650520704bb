"""The memory layer as one service: ingest, remember/forget, the pack, reinforcement, decay.

``MemoryService`` is a façade over layers, each in a module named for its job
(the "Memory modules" section of docs/DESIGN.md): the shared state
(memory/state.py), the per-person indexes (memory/indexes.py), re-embedding
(memory/reembed.py), writes (memory/writes.py), recall — the pack's query path
and trace (memory/recall.py) — and upkeep (memory/upkeep.py). This module
starts and closes them as one, and re-exports the requests and results callers
import from here.

Model and index work crosses to worker threads (``asyncio.to_thread``);
without an embedder (``memory.embedder = "none"`` or a model that failed to
load) everything still works on full text alone, and the traces say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from gateway.config import Config, MemoryConfig
from gateway.store import Store
from gateway.zones import PersonZones
from memory.embed import Embedder
from memory.errors import EmbeddingUnavailable
from memory.state import (
    ANCHOR_SPAN,
    BACKFILL_REPORT,
    EPISODES_CUT_AT,
    REMEMBER_PRIORITY,
    Episode,
    Forgotten,
    Pack,
    PackRequest,
    Reinforced,
    Remembered,
    SweepStats,
    decay_policy,
    embedding_text,
    load_embedder,
    pack_settings,
    single_threaded_blas,
)
from memory.upkeep import Upkeep

log = logging.getLogger(__name__)

__all__ = [
    "ANCHOR_SPAN",
    "BACKFILL_REPORT",
    "EPISODES_CUT_AT",
    "REMEMBER_PRIORITY",
    "Episode",
    "Forgotten",
    "MemoryService",
    "Pack",
    "PackRequest",
    "Reinforced",
    "Remembered",
    "SweepStats",
    "decay_policy",
    "embedding_text",
    "load_embedder",
    "pack_settings",
    "single_threaded_blas",
]


class MemoryService(Upkeep):
    """The façade: the layers below, started and closed as one."""

    @classmethod
    async def start(
        cls,
        store: Store,
        config: Config,
        *,
        embedder: Embedder | None = None,
        zones: PersonZones | None = None,
        loader: Callable[[MemoryConfig], Embedder] = load_embedder,
    ) -> MemoryService:
        """The service for ``config``; loads the embedder with ``loader`` in a worker
        thread unless given."""
        memory = config.memory
        if embedder is None and memory.embedder == "minilm":
            try:
                embedder = await asyncio.to_thread(loader, memory)
            except EmbeddingUnavailable as exc:
                log.warning("memory: %s; recall runs on full text only", exc)
        service = cls(
            store,
            memory,
            config.data_dir / "memory-index",
            embedder,
            zones=zones if zones is not None else PersonZones(store, config.zone),
            jobs=config.upkeep_jobs,
        )
        try:
            await service.begin_reembedding()
            await service.cut_long_episodes()
        except BaseException:
            # Stopped or failed halfway: the background pass it began ends here too.
            await service.aclose()
            raise
        return service

    async def aclose(self) -> None:
        await self.tree.aclose()
        if self._reembed_task is not None:
            # What it embedded is stored; the next start goes on from there.
            self._reembed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reembed_task
        await self.traces_saved()
        for task in list(self._lexical_builds.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._embeds is not None:
            await self._embeds.aclose()
        if self._query_embeds is not None:
            await self._query_embeds.aclose()
        await self.save_indexes()
        await self._evictions.aclose()
        self._indexes.clear()
