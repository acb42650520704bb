"""Writing memory: ingest, remember, supersede, retire, forget, and cutting long episodes.

Each write keeps both of the person's indexes in step with the store.

One layer of ``memory.service.MemoryService`` (see the "Memory modules" section
of docs/DESIGN.md): each layer uses only the state and the layers below it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo

import numpy as np
from numpy.typing import NDArray

from gateway.clock import local
from memory import repo
from memory.categories import CategoryPrototypes, rule_category
from memory.decay import content_words
from memory.lexical import LexicalIndex
from memory.models import MemoryItem
from memory.passages import passages
from memory.repo import NewItem
from memory.salience import salience
from memory.state import (
    EPISODES_CUT_AT,
    REMEMBER_PRIORITY,
    Episode,
    Forgotten,
    Remembered,
    embedding_text,
    fields_of,
)
from memory.timeparse import resolve_window
from memory.types import ItemStatus, ItemType, Tier
from memory.validity import Validity

# The service's one logger name, as before the split (log configs and tests name it).
log = logging.getLogger("memory.service")


class Writes(Validity):
    async def add_items(self, items: Sequence[NewItem]) -> list[int]:
        """Embed (one batch), store and index new items; their ids in order."""
        if not items:
            return []
        matrix = await self._embed([embedding_text(i.type, i.speaker, i.content) for i in items])
        model = self.embedder.model_name if self.embedder is not None else ""
        if matrix is not None:
            items = [
                NewItem(**{**fields_of(item), "vector": matrix[n], "embedding_model": model})
                for n, item in enumerate(items)
            ]
        items = self._categorised(items)
        ids = await repo.insert_items(self.store, items)
        recallable: dict[int, list[tuple[int, str, str]]] = {}
        # Taken now: one may be evicted while another is added to (then the rows are
        # read from the store when it is loaded again).
        lexicals: dict[int, LexicalIndex] = {}
        for item_id, item in zip(ids, items, strict=True):
            lexical = self._lexical.get(item.person_id)
            if item.status is ItemStatus.ACTIVE and lexical is not None:
                lexicals[item.person_id] = lexical
                recallable.setdefault(item.person_id, []).append(
                    (item_id, item.content, item.speaker)
                )
        for person_id, found in recallable.items():
            await asyncio.to_thread(lexicals[person_id].add, found)
            self._used(person_id)
        if matrix is not None:
            by_person: dict[int, list[int]] = {}
            for n, item in enumerate(items):
                if item.status is ItemStatus.ACTIVE:
                    by_person.setdefault(item.person_id, []).append(n)
            for person_id, rows in by_person.items():
                index = await self.index(person_id)
                if index is not None:
                    await asyncio.to_thread(index.add, [ids[n] for n in rows], matrix[rows])
                    await self._maybe_save(index)
                    self._used(person_id)
        # The active ids of each person: told to the cluster's other gateways, and
        # placed in the tree.
        written: dict[int, list[int]] = {}
        for item_id, item in zip(ids, items, strict=True):
            if item.status is ItemStatus.ACTIVE:
                written.setdefault(item.person_id, []).append(item_id)
        if self.publish is not None:
            for person_id, active in sorted(written.items()):
                await self._published("add", person_id, active)
        # Stored and indexed first: ending an older statement never loses the new one.
        await self.apply_validity(ids, items)
        if self.config.tree and matrix is not None:
            # The tree places the new leaves later, off the reply's path (memory/tree/).
            self.tree.schedule(written)
        return ids

    def _categorised(self, items: Sequence[NewItem]) -> Sequence[NewItem]:
        """Items given the category their type or keywords settle (memory/categories.py).
        The rest, and every item when a utility model is configured, are left to the
        weekly job: the prototypes it also weighs cost an embedding of their own, and
        the write path embeds only what it stores."""
        if self.utility is not None or all(item.category for item in items):
            return items
        out = []
        for item in items:
            found = None if item.category else rule_category(item.type, item.content)
            out.append(
                item if found is None else NewItem(**{**fields_of(item), "category": str(found)})
            )
        return out

    async def category_prototypes(self) -> CategoryPrototypes | None:
        """The categories' prototype vectors of this model (embedded once); None
        without an embedder."""
        embedder = self.embedder
        if embedder is None:
            return None
        found = self._prototypes
        if found is None or found.model != embedder.model_name:
            pairs = CategoryPrototypes.texts()
            matrix = await self._embed([text for _, text in pairs])
            if matrix is None:
                return None
            found = CategoryPrototypes(matrix, tuple(c for c, _ in pairs), embedder.model_name)
            self._prototypes = found
        return found

    async def ingest(self, episodes: Sequence[Episode]) -> list[int]:
        """Every message becomes an episode item, with the dates it refers to; a long
        one becomes one item per passage (``memory.passage_chars``), in order. The ids
        of the items stored, in order."""
        items = []
        for e in episodes:
            items.extend(self._passage_items(e, await self.zones.of(e.person_id)))
            if e.speaker and e.person_id in self._speakers:
                self._speakers[e.person_id].add(e.speaker.split()[0])
        return await self.add_items(items)

    def _passage_items(self, e: Episode, zone: tzinfo) -> list[NewItem]:
        """The episode items of one message: itself, or its passages."""
        items = []
        for text in passages(e.text, self.config.passage_chars):
            window = resolve_window(text, local(e.at, zone))
            items.append(
                NewItem(
                    person_id=e.person_id,
                    type=ItemType.EPISODE,
                    content=text,
                    occurred_at=e.at,
                    speaker=e.speaker,
                    role=e.role,
                    author=e.role,
                    channel=e.channel,
                    conversation_id=e.conversation_id,
                    source_message_ids=() if e.message_id is None else (e.message_id,),
                    source_ref=e.source_ref,
                    refers_start=window.start if window else None,
                    refers_end=window.end if window else None,
                    status=e.status,
                    priority=salience(text) if self.config.episode_salience else 0.0,
                )
            )
        return items

    async def cut_long_episodes(self, batch: int = 100) -> int:
        """Episodes stored whole and longer than a passage (before passages existed, or
        before ``memory.passage_chars`` was lowered) become their passages, as a new
        message would; the whole one is superseded by the first, kept for the record.
        The store remembers the length it was cut to, so a start with the same or a
        longer one reads nothing. The number of episodes cut."""
        limit = self.config.passage_chars
        known = await repo.store_fact(self.store, EPISODES_CUT_AT)
        if known is not None and known.isdigit() and int(known) <= limit:
            return 0
        cut, after = 0, 0
        while rows := await repo.long_episodes(self.store, limit, after, batch):
            for whole in rows:
                await self._cut(whole)
            after = rows[-1].id
            cut += len(rows)
        await repo.set_store_fact(self.store, EPISODES_CUT_AT, str(limit))
        if cut:
            log.info("memory: %d long episodes kept as passages of %d characters", cut, limit)
        return cut

    async def _cut(self, whole: MemoryItem) -> None:
        said = Episode(
            person_id=whole.person_id,
            text=whole.content,
            at=whole.occurred_at,
            role=whole.role,
            speaker=whole.speaker,
            conversation_id=whole.conversation_id,
            message_id=whole.source_message_ids[0] if whole.source_message_ids else None,
            channel=whole.channel,
            source_ref=whole.source_ref,
        )
        parts = self._passage_items(said, await self.zones.of(whole.person_id))
        ids = await self.add_items(parts)
        # The passages are the message it was: as used, as pinned, as far decayed.
        await repo.carry_use(self.store, ids, whole)
        if whole.tier is Tier.ARCHIVED:
            await self._unindex(whole.person_id, ids)
        await repo.set_status(
            self.store, [whole.id], ItemStatus.SUPERSEDED, datetime.now(UTC), superseded_by=ids[0]
        )
        await self.unrecall(whole.person_id, [whole.id])

    async def vector_of(self, item: MemoryItem) -> NDArray[np.float32] | None:
        """The item's vector of this model: the stored one, else embedded now and stored."""
        if self.embedder is None:
            return None
        vector: NDArray[np.float32] = (await self._current_vectors([item.id]))[0]
        return vector

    async def remember(
        self,
        person_id: int,
        text: str,
        *,
        at: datetime,
        speaker: str = "",
        message_id: int | None = None,
        conversation_id: int | None = None,
        channel: str = "",
        item_type: ItemType | None = None,
    ) -> Remembered:
        """Store what the person asked to be remembered; it supersedes a close older item."""
        from memory.commands import classify

        kind = item_type or classify(text)
        window = resolve_window(text, local(at, await self.zones.of(person_id)))
        (item_id,) = await self.add_items(
            [
                NewItem(
                    person_id=person_id,
                    type=kind,
                    content=text,
                    occurred_at=at,
                    speaker=speaker,
                    role="user",
                    author="remember",
                    channel=channel,
                    conversation_id=conversation_id,
                    source_message_ids=() if message_id is None else (message_id,),
                    priority=REMEMBER_PRIORITY,
                    refers_start=window.start if window else None,
                    refers_end=window.end if window else None,
                )
            ]
        )
        superseded = await self.supersede(person_id, item_id, kind, text, at)
        return Remembered(item_id, kind, text, superseded)

    async def supersede(
        self, person_id: int, item_id: int, kind: ItemType, text: str, at: datetime
    ) -> tuple[tuple[int, str], ...]:
        """Older items of the same type this close to the new one stop being current."""
        if kind is ItemType.EPISODE:
            return ()
        model = self.embedder.model_name if self.embedder is not None else ""
        others = await repo.similar_active(self.store, person_id, kind, item_id, model)
        new_vector = (await repo.vectors(self.store, [item_id]))[0] if self.dense else None
        replaced = []
        for other_id, content, vector in others:
            if new_vector is not None and vector is not None:
                close = float(vector @ new_vector) >= self.config.supersede_similarity
            else:
                mine, theirs = content_words(text), content_words(content)
                close = bool(mine | theirs) and len(mine & theirs) / len(mine | theirs) >= 0.6
            if close:  # a newer version, or the same thing said again: the newest is current
                replaced.append((other_id, content))
        if replaced:
            ids = [r[0] for r in replaced]
            await repo.set_status(self.store, ids, ItemStatus.SUPERSEDED, at, superseded_by=item_id)
            await self.unrecall(person_id, ids)
            log.info("memory %d supersedes %s", item_id, ids)
        return tuple(replaced)

    async def retire(self, item_id: int, status: ItemStatus) -> None:
        """One item stops being recalled (superseded or forgotten) but stays in the store."""
        rows = await repo.get_items(self.store, [item_id])
        if not rows:
            return
        await repo.set_status(self.store, [item_id], status, datetime.now(UTC))
        await self.unrecall(rows[0].person_id, [item_id])

    async def forget(self, person_id: int, what: str, *, at: datetime) -> Forgotten:
        """Items holding every content word of ``what`` (and close to it) stop being recalled."""
        hits = await self._full_text(person_id, what, self.config.forget_max_items * 3, every=True)
        if not hits:
            return Forgotten(what)
        found = await repo.fetch(self.store, [h for h, _ in hits])
        query = await self._embed([what])
        chosen: list[tuple[int, str]] = []
        for item_id, _score in hits:
            if item_id not in found:
                continue
            view, vector = found[item_id]
            if self._too_far(query, vector):
                continue
            chosen.append((item_id, view.content))
            if len(chosen) >= self.config.forget_max_items:
                break
        ids = [c[0] for c in chosen]
        await repo.set_status(self.store, ids, ItemStatus.FORGOTTEN, at)
        await self.unrecall(person_id, ids)
        if ids:
            log.info("memory: person %d asked to forget %r: items %s", person_id, what, ids)
        return Forgotten(what, tuple(chosen))

    def _too_far(
        self, query: NDArray[np.float32] | None, vector: NDArray[np.float32] | None
    ) -> bool:
        if query is None or vector is None:
            return False
        return float(vector @ query[0]) < self.config.forget_similarity
