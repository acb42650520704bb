"""Exact search over a matrix: the index of a person with few items.

hnswlib 0.8 gives every index a table of 65,536 mutexes, 2.6 MB however few
items it holds, and most people hold few: a person with 100 items had a 2.7
MB index where their vectors take 150 KB. Below ``FLAT_MAX`` items a
person's index is this matrix instead, searched exactly (one matrix-vector
product: 0.10 ms for the nearest 10 of 1,024 items of 384 dimensions, 0.22
ms for 50, measured here, where hnswlib took 0.21 and 0.24 ms over 2,024;
1.7 MB against 9.8 MB), and ``PersonIndex`` moves it into hnswlib when it
grows past. It answers the part of hnswlib's interface ``PersonIndex`` uses,
with the same meaning (inner-product distance ``1 - cosine``, labels marked
deleted and unmarked, a room that grows by ``resize_index``), so the index
code is one path for both.

Blocking and not thread-safe by itself: ``PersonIndex`` holds its lock.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

# Past this many items a person's index moves into hnswlib: from there its fixed
# 2.6 MB is less than the vectors' own 1.5 MB per 1,000 (384 dimensions).
FLAT_MAX = 1024
# Per item: its entry in the label-to-row map.
_ROW_BYTES = 100


class FlatIndex:
    """Vectors, their labels and deleted marks, in rows appended in order."""

    def __init__(self, dim: int, capacity: int) -> None:
        self.dim = dim
        self._vectors = np.zeros((capacity, dim), np.float32)
        self._labels = np.zeros(capacity, np.int64)
        self._deleted = np.zeros(capacity, bool)
        self._row_of: dict[int, int] = {}
        self._count = 0

    @property
    def max_elements(self) -> int:
        return len(self._labels)

    @property
    def element_count(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        arrays = self._vectors.nbytes + self._labels.nbytes + self._deleted.nbytes
        return arrays + len(self._row_of) * _ROW_BYTES

    def get_max_elements(self) -> int:
        return self.max_elements

    def get_current_count(self) -> int:
        return self._count

    def set_ef(self, ef: int) -> None:
        """Nothing to tune: the search is exact."""

    def resize_index(self, capacity: int) -> None:
        if capacity < self._count:
            raise RuntimeError(f"cannot shrink to {capacity} below {self._count} items")
        vectors = np.zeros((capacity, self.dim), np.float32)
        vectors[: self._count] = self._vectors[: self._count]
        labels = np.zeros(capacity, np.int64)
        labels[: self._count] = self._labels[: self._count]
        deleted = np.zeros(capacity, bool)
        deleted[: self._count] = self._deleted[: self._count]
        self._vectors, self._labels, self._deleted = vectors, labels, deleted

    def add_items(
        self, vectors: NDArray[np.float32], ids: NDArray[np.int64], num_threads: int = 1
    ) -> None:
        """Append new labels (``PersonIndex`` never adds one it holds)."""
        end = self._count + len(ids)
        if end > self.max_elements:
            raise RuntimeError(f"the room of {self.max_elements} cannot take {end} items")
        self._vectors[self._count : end] = vectors
        self._labels[self._count : end] = ids
        for offset, label in enumerate(ids.tolist()):
            self._row_of[int(label)] = self._count + offset
        self._count = end

    def mark_deleted(self, label: int) -> None:
        self._deleted[self._row_of[label]] = True

    def unmark_deleted(self, label: int) -> None:
        self._deleted[self._row_of[label]] = False

    def get_ids_list(self) -> list[int]:
        return [int(label) for label in self._labels[: self._count].tolist()]

    def rows(self) -> tuple[NDArray[np.float32], NDArray[np.int64], NDArray[np.bool_]]:
        """Vectors, labels and deleted marks of the items held (for a move to hnswlib)."""
        n = self._count
        return self._vectors[:n], self._labels[:n], self._deleted[:n]

    def knn_query(
        self, vectors: NDArray[np.float32], k: int = 1, num_threads: int = 1
    ) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
        """The ``k`` nearest live labels to the one query row, and their distances."""
        n = self._count
        scores = self._vectors[:n] @ vectors[0]
        scores[self._deleted[:n]] = -np.inf
        live = int(n - self._deleted[:n].sum())
        if k > live:
            raise RuntimeError(f"{k} nearest asked of {live} items")
        best = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        best = best[np.argsort(-scores[best], kind="stable")]
        distances = (1.0 - scores[best]).astype(np.float32)
        return self._labels[best][None, :], distances[None, :]

    def save_index(self, path: str) -> None:
        vectors, labels, deleted = self.rows()
        with Path(path).open("wb") as file:
            np.savez(file, allow_pickle=False, vectors=vectors, labels=labels, deleted=deleted)

    @classmethod
    def load(cls, path: Path, dim: int, capacity: int) -> FlatIndex:
        """What ``save_index`` wrote; ``ValueError`` when it is not that."""
        with path.open("rb") as file, np.load(file, allow_pickle=False) as data:
            vectors, labels, deleted = data["vectors"], data["labels"], data["deleted"]
        if vectors.ndim != 2 or vectors.shape[1] != dim or not len(labels) == len(deleted):
            raise ValueError(f"arrays of shapes {vectors.shape}, {labels.shape}, {deleted.shape}")
        if len(vectors) != len(labels):
            raise ValueError(f"{len(vectors)} vectors for {len(labels)} labels")
        index = cls(dim, max(capacity, len(labels)))
        index.add_items(vectors.astype(np.float32), labels.astype(np.int64))
        index._deleted[: len(deleted)] = deleted.astype(bool)
        return index
