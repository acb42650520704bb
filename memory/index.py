"""One hnswlib index per person, persisted beside the database.

Files: ``<dir>/person-<id>.hnsw`` and ``person-<id>.json`` (dimension, model,
the database it was made from, labels marked deleted, the SHA-256 of the index
file). The store holds every vector, so an index is a cache: a missing, corrupt
(checksum or load failure), wrong-dimension or other database's index is
rebuilt from the store, and a stale one (a crash before its last save) is
brought up to date by adding the missing vectors and deleting labels that
left; nothing is re-embedded. Everything here blocks: the service calls it
through ``asyncio.to_thread``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memory.errors import IndexUnavailable
from memory.flat_index import FLAT_MAX, FlatIndex

log = logging.getLogger(__name__)

# A new index's room, doubled as it fills (``resize_index``): most people have few
# items, and a room of 1,024 made every one's file and memory a big person's.
INITIAL_CAPACITY = 32
# hnswlib 0.8 gives every index a table of 65,536 mutexes (``label_op_locks_``, 40
# bytes each on Linux): 2.6 MB however few items it holds, the most of a small
# person's index. Measured here: 200 indexes of one item raised the RSS 2.64 MB each.
_FIXED_BYTES = 65536 * 40
# Per element of room: its level-0 links and vector (counted below), its lock,
# level and upper-links pointer, and the visited-list mark.
_ROOM_BYTES = 40 + 4 + 8 + 2
# Per element held: its entry in the label map.
_HELD_BYTES = 64


@dataclass(frozen=True)
class IndexParams:
    dim: int
    m: int = 16
    ef_construction: int = 100
    ef_search: int = 64
    model: str = ""
    # The database the index is made from (``Store.identity``): its ids name its items.
    store: str = ""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class PersonIndex:
    """The ANN index of one person's indexable items (active status, not archived)."""

    def __init__(self, folder: Path, person_id: int, params: IndexParams) -> None:
        self.person_id = person_id
        self.path = folder / f"person-{person_id}.hnsw"
        self.meta_path = folder / f"person-{person_id}.json"
        self.params = params
        self._lock = threading.Lock()
        self._index: Any = None
        self._live: set[int] = set()
        self._deleted: set[int] = set()
        self._dirty = 0
        # How the index came to be this time: loaded, rebuilt (and why), updated.
        self.origin = ""

    @property
    def count(self) -> int:
        return len(self._live)

    @property
    def dirty(self) -> int:
        return self._dirty

    @property
    def nbytes(self) -> int:
        """Memory the index holds (0 before it is opened), as hnswlib allocates it:
        for 2,000 items in a room of 2,048 this says 6.3 MB, the RSS grew 6.2 MB."""
        index = self._index
        if index is None:
            return 0
        if isinstance(index, FlatIndex):
            return index.nbytes
        m, room, held = self.params.m, int(index.max_elements), int(index.element_count)
        level0 = (2 * m) * 4 + 4 + self.params.dim * 4 + 8
        # An element reaches the upper levels with probability 1/m, 1/m^2, ...
        upper = held * (m * 4 + 4) // max(m - 1, 1)
        return _FIXED_BYTES + room * (level0 + _ROOM_BYTES) + held * _HELD_BYTES + upper

    def _new(self, items: int) -> Any:
        """An empty index with room for ``items`` and as many again: exact search
        (memory/flat_index.py) up to ``FLAT_MAX`` items, hnswlib past it."""
        if items <= FLAT_MAX:
            return FlatIndex(self.params.dim, min(max(2 * items, INITIAL_CAPACITY), FLAT_MAX))
        return self._hnsw(2 * items)

    def _hnsw(self, capacity: int) -> Any:
        import hnswlib

        index = hnswlib.Index(space="ip", dim=self.params.dim)
        index.init_index(
            max_elements=max(capacity, INITIAL_CAPACITY),
            ef_construction=self.params.ef_construction,
            M=self.params.m,
            allow_replace_deleted=False,
        )
        index.set_ef(self.params.ef_search)
        return index

    def _try_load(self) -> str:
        """Load the files; the reason to rebuild instead, or "" when loaded."""
        if not self.path.is_file() or not self.meta_path.is_file():
            return "missing"
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return "corrupt metadata"
        if meta.get("dim") != self.params.dim:
            return f"dimension {meta.get('dim')} is not {self.params.dim}"
        if meta.get("model") != self.params.model:
            return f"model {meta.get('model')!r} is not {self.params.model!r}"
        # Files saved before databases had names are taken to be this one's.
        if meta.get("store", self.params.store) != self.params.store:
            return "made from another database"
        if meta.get("sha256") != _sha256(self.path):
            return "corrupt (checksum)"
        capacity = int(meta.get("capacity", 0)) or 0
        index: Any
        if meta.get("kind") == "flat":
            try:
                index = FlatIndex.load(self.path, self.params.dim, min(capacity, FLAT_MAX))
            except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile) as exc:
                return f"corrupt ({exc})"
        else:
            # Files saved before flat indexes were made are hnswlib's.
            import hnswlib

            index = hnswlib.Index(space="ip", dim=self.params.dim)
            try:
                index.load_index(str(self.path), max_elements=capacity)
            except (RuntimeError, ValueError, OSError) as exc:
                return f"corrupt ({exc})"
        index.set_ef(self.params.ef_search)
        labels = {int(label) for label in index.get_ids_list()}
        self._deleted = {int(i) for i in meta.get("deleted", [])} & labels
        self._live = labels - self._deleted
        self._index = index
        return ""

    def open(self, ids: Iterable[int]) -> list[int]:
        """Load (or start afresh) so the index holds at most ``ids``; the ids still missing.

        The caller adds the missing ones with their stored vectors, then saves.
        """
        with self._lock:
            wanted = {int(i) for i in ids}
            reason = self._try_load()
            if reason == "missing":
                # A new person's first index, or files removed by hand: nothing is
                # wrong, the store has every vector (the service logs the outcome).
                log.debug("memory index %s: none saved yet; made from the store", self.path.name)
            elif reason:
                log.warning(
                    "memory index %s: %s; rebuilding from the store", self.path.name, reason
                )
            if reason:
                self._index = self._new(len(wanted))
                self._live, self._deleted = set(), set()
                self.origin = f"rebuilt: {reason}"
            else:
                self.origin = "loaded"
            missing, leaving = self._keep_only_locked(wanted)
            if (missing or leaving) and not reason:
                self.origin = f"loaded, updated (+{len(missing)} -{len(leaving)})"
            return missing

    def start_afresh(self, items: int, reason: str) -> None:
        """Empty, with room for ``items``: a rebuild (the caller adds them, then saves)."""
        with self._lock:
            self._index = self._new(items)
            self._live, self._deleted = set(), set()
            self._dirty = 0
            self.origin = f"rebuilt: {reason}"

    @property
    def deleted_slots(self) -> int:
        """Slots of deleted items the index still holds (a rebuild drops them)."""
        return len(self._deleted)

    def saved_deleted_slots(self) -> int:
        """The deleted slots of the saved file (0 when there is none or it is unreadable)."""
        try:
            meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return 0
        return len(meta.get("deleted", [])) if isinstance(meta, dict) else 0

    def keep_only(self, ids: Iterable[int]) -> list[int]:
        """Delete what is not in ``ids``; the ids still missing (the caller adds them)."""
        with self._lock:
            missing, _ = self._keep_only_locked({int(i) for i in ids})
            return missing

    def _keep_only_locked(self, wanted: set[int]) -> tuple[list[int], list[int]]:
        missing = sorted(wanted - self._live)
        leaving = sorted(self._live - wanted)
        self._delete_locked(leaving)
        return missing, leaving

    def _add_locked(self, ids: NDArray[np.int64], vectors: NDArray[np.float32]) -> None:
        if len(ids) == 0:
            return
        if vectors.shape != (len(ids), self.params.dim):
            raise IndexUnavailable(f"vectors of shape {vectors.shape} for {len(ids)} ids")
        revive = [int(i) for i in ids if int(i) in self._deleted]
        for label in revive:
            self._index.unmark_deleted(label)
            self._deleted.discard(label)
        fresh_mask = np.array([int(i) not in self._live and int(i) not in revive for i in ids])
        fresh_ids, fresh_vectors = ids[fresh_mask], vectors[fresh_mask]
        needed = self._index.get_current_count() + len(fresh_ids)
        if isinstance(self._index, FlatIndex) and needed > FLAT_MAX:
            self._index = self._moved_to_hnsw(self._index, 2 * needed)
        if needed > self._index.get_max_elements():
            room = max(needed, self._index.get_max_elements() * 2)
            if isinstance(self._index, FlatIndex):
                room = min(room, FLAT_MAX)
            self._index.resize_index(room)
        if len(fresh_ids):
            self._index.add_items(fresh_vectors, fresh_ids, num_threads=1)
        self._live.update(int(i) for i in ids)
        self._dirty += len(ids)

    def _moved_to_hnsw(self, flat: FlatIndex, capacity: int) -> Any:
        """The flat index's items (and deleted marks) in an hnswlib index."""
        index = self._hnsw(capacity)
        vectors, labels, deleted = flat.rows()
        if len(labels):
            index.add_items(vectors, labels, num_threads=1)
        for label in labels[deleted].tolist():
            index.mark_deleted(int(label))
        return index

    def add(self, ids: Iterable[int], vectors: NDArray[np.float32]) -> None:
        with self._lock:
            self._add_locked(np.array(list(ids), dtype=np.int64), vectors)

    def _delete_locked(self, ids: Iterable[int]) -> None:
        for label in ids:
            if label in self._live:
                self._index.mark_deleted(label)
                self._live.discard(label)
                self._deleted.add(label)
                self._dirty += 1

    def delete(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._delete_locked(ids)

    def search(self, vector: NDArray[np.float32], k: int) -> list[tuple[int, float]]:
        """(item id, cosine) of the ``k`` nearest live items, best first."""
        with self._lock:
            k = min(k, len(self._live))
            if k <= 0:
                return []
            self._index.set_ef(max(self.params.ef_search, k))
            while True:
                try:
                    labels, distances = self._index.knn_query(
                        vector.reshape(1, -1), k=k, num_threads=1
                    )
                    break
                except RuntimeError:
                    # Too few reachable live items for k (many deleted): ask for fewer.
                    if k <= 1:
                        return []
                    k //= 2
        return [
            (int(label), 1.0 - float(d)) for label, d in zip(labels[0], distances[0], strict=True)
        ]

    def _save_locked(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".hnsw.tmp")
        try:
            self._index.save_index(str(tmp))
            os.replace(tmp, self.path)
            meta = {
                "dim": self.params.dim,
                "model": self.params.model,
                "store": self.params.store,
                "kind": "flat" if isinstance(self._index, FlatIndex) else "hnsw",
                "capacity": int(self._index.get_max_elements()),
                "count": len(self._live),
                "deleted": sorted(self._deleted),
                "sha256": _sha256(self.path),
            }
            meta_tmp = self.meta_path.with_suffix(".json.tmp")
            meta_tmp.write_text(json.dumps(meta), encoding="utf-8")
            os.replace(meta_tmp, self.meta_path)
        except (OSError, RuntimeError) as exc:
            raise IndexUnavailable(f"cannot save {self.path}: {exc}") from exc
        self._dirty = 0

    def save(self) -> None:
        with self._lock:
            if self._index is not None:
                self._save_locked()
