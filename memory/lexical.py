"""BM25 over one person's items, held in memory: SQLite's own tokenizer, numpy's scoring.

FTS5 ranks every row that matches any term of the query before it can return
the best few, and on a chat store the words of a question match a large share
of it: at 100,000 items a three-word question matched 14,000 rows and took
12 ms, at a million it would take ten times that. Here each term's postings
(the slots of the items holding it and its weighted count) are numpy arrays,
so scoring a term is arithmetic over its postings, and the terms' shares are
summed by merging their sorted slots: ~0.5 ms at 100,000 items, ~5 ms at a
million, where a question's common words hold ~50,000 postings each.

Tokens come from FTS5 itself, with the store's tokenizer (porter stemming,
unicode61, diacritics removed), run in a private in-memory SQLite database:
the stems here are exactly the stems the store's full-text table holds, with
no second stemmer to drift from it. The score is FTS5's ``bm25()`` (k1 1.2,
b 0.75, the content column weighted 1, the speaker column 0.5), with the
document statistics (count, lengths, how many hold a term) of this person's
recallable items rather than of everyone's.

The index holds the items that are recallable (active status, any tier, so
an archived item is found when referred to). It is built from the store the
first time a person's pack needs it and kept in step by the memory service:
new items are added, retired ones discarded, restored ones added again.
It is saved beside the ANN index and, at the next start, loaded and brought
up to date with what the store holds by then.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

# The store's full-text tokenizer (migration 0002): the stems must be the same.
TOKENIZE = "porter unicode61 remove_diacritics 2"
# bm25(memory_fts, 1.0, 0.5): the weights of the content and speaker columns.
COLUMN_WEIGHTS = {"content": 1.0, "speaker": 0.5}
K1 = 1.2
B = 0.75

LexicalRow = tuple[int, str, str]  # item id, content, speaker

# What ``LexicalIndex.nbytes`` counts per item (its id's entry in the slot map), per
# stem (the key, its postings object, list, tuple and two small arrays) and per
# posting (an int32 slot and a float32 weight). Measured with tracemalloc: 2,000
# lines of 12 words over 5,000 stems took 2.83 MB, and these say 2.83 MB.
_SLOT_BYTES = 100
_STEM_BYTES = 480
_POSTING_BYTES = 8


class Fts5Tokenizer:
    """Stems as FTS5 makes them, from private in-memory databases. Thread-safe.

    Documents (bulk, at a build or an ingest) and a message's words (every pack)
    each have a database of their own: a pack never waits behind a batch of
    thousands of documents, and never reads what the batches left behind.
    """

    def __init__(self, tokenize: str = TOKENIZE) -> None:
        self._docs, self._docs_lock = self._open(tokenize), threading.Lock()
        self._words, self._words_lock = self._open(tokenize), threading.Lock()

    @staticmethod
    def _open(tokenize: str) -> sqlite3.Connection:
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.execute(f"CREATE VIRTUAL TABLE docs USING fts5(content, speaker, tokenize={tokenize!r})")
        db.execute("CREATE VIRTUAL TABLE terms USING fts5vocab(docs, 'instance')")
        return db

    def documents(
        self, rows: Sequence[LexicalRow]
    ) -> tuple[list[tuple[int, str, str, int]], dict[int, int]]:
        """(item id, stem, column, count) for every stem of every row, and each row's
        length in tokens (all columns, as FTS5 counts it)."""
        with self._docs_lock, self._docs as db:
            db.execute("DELETE FROM docs")
            db.executemany("INSERT INTO docs(rowid, content, speaker) VALUES (?, ?, ?)", rows)
            counts = db.execute(
                "SELECT doc, term, col, count(*) FROM terms GROUP BY doc, term, col"
            ).fetchall()
            db.execute("DELETE FROM docs")
            # Deleted rows stay in FTS5's segments until a merge, and the vocabulary
            # reads them all: after a 100k-item build the table held 456 pages of
            # them, and reading the one word's stems took 35 ms. Merged now, a few
            # ms after a batch of thousands, nothing for a message's few rows.
            db.execute("INSERT INTO docs(docs) VALUES ('optimize')")
        lengths: dict[int, int] = {}
        for doc, _, _, count in counts:
            lengths[doc] = lengths.get(doc, 0) + count
        return counts, lengths

    def stems(self, words: Sequence[str]) -> list[str]:
        """The stem of each word, in order (a word that yields no token is left out)."""
        if not words:
            return []
        with self._words_lock, self._words as db:
            db.execute("DELETE FROM docs")
            db.execute(
                "INSERT INTO docs(rowid, content, speaker) VALUES (1, ?, '')", (" ".join(words),)
            )
            found = db.execute(
                "SELECT term FROM terms WHERE col = 'content' ORDER BY offset"
            ).fetchall()
            db.execute("DELETE FROM docs")
        return [term for (term,) in found]

    def pages(self) -> tuple[int, int]:
        """FTS5's stored pages in the documents' and the words' databases (empty: a few)."""
        with self._docs_lock, self._words_lock:
            return (
                int(self._docs.execute("SELECT count(*) FROM docs_data").fetchone()[0]),
                int(self._words.execute("SELECT count(*) FROM docs_data").fetchone()[0]),
            )


class _Postings:
    """One stem's postings: chunks as they were added, joined on first read."""

    __slots__ = ("chunks",)

    def __init__(self) -> None:
        self.chunks: list[tuple[NDArray[np.int32], NDArray[np.float32]]] = []

    def arrays(self) -> tuple[NDArray[np.int32], NDArray[np.float32]]:
        if len(self.chunks) > 1:
            self.chunks = [_joined(self.chunks)]
        return self.chunks[0]


def _joined(
    chunks: Sequence[tuple[NDArray[np.int32], NDArray[np.float32]]],
) -> tuple[NDArray[np.int32], NDArray[np.float32]]:
    """The chunks' slots and weights, each as one array."""
    if len(chunks) == 1:
        return chunks[0]
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])


class LexicalIndex:
    """One person's recallable items, searchable by BM25. Thread-safe; blocking."""

    def __init__(self, tokenizer: Fts5Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        # Each item's newest slot. Slots are never reused: an item added again after
        # it was discarded gets a new one, as its id may now be another item's (SQLite
        # gave the highest id again after a delete until migration 0009).
        self._slot_of: dict[int, int] = {}
        self._size = 0
        self._ids = np.zeros(0, np.int64)
        self._lengths = np.zeros(0, np.float64)
        self._live = np.zeros(0, bool)
        self._live_count = 0
        self._live_length = 0.0
        self._postings: dict[str, _Postings] = {}
        # (slot, weight) pairs in the postings, for ``nbytes``.
        self._posted = 0
        # Changes since the last save (or load).
        self.dirty = 0

    @property
    def count(self) -> int:
        """Recallable items in the index."""
        return self._live_count

    @property
    def nbytes(self) -> int:
        """Memory the index holds, about: its arrays, and Python's objects at their
        measured sizes (see ``_STEM_BYTES``)."""
        arrays = self._ids.nbytes + self._lengths.nbytes + self._live.nbytes
        return (
            arrays
            + len(self._slot_of) * _SLOT_BYTES
            + len(self._postings) * _STEM_BYTES
            + self._posted * _POSTING_BYTES
        )

    def live_ids(self) -> set[int]:
        """The ids of the items the index holds as recallable."""
        with self._lock:
            size = self._size
            return set(self._ids[:size][self._live[:size]].tolist())

    def save(self, path: Path, store: str) -> None:
        """Write the index to ``path`` (replaced whole, never left half written),
        made from the database named ``store`` (``Store.identity``).

        Searches wait only while the flags are copied. Postings are never changed
        in place, only appended to (or joined), so they are read after the lock is
        let go, as they were when it was held: what was added since is left out
        (its slots are the copied count or more) and counts as a change still to
        save.
        """
        with self._lock:
            size = self._size
            arrays: dict[str, NDArray[Any]] = {
                "header": _bytes(_header(store)),
                "ids": self._ids[:size].copy(),
                "lengths": self._lengths[:size].copy(),
                "live": self._live[:size].copy(),
            }
            # Keys and values as two lists, paired after the lock: a list of 100k
            # (key, value) pairs took 50 ms here, 43 of them in the cyclic collector
            # its new tuples set off, and searches wait while this lock is held.
            keys, values = list(self._postings), list(self._postings.values())
            self.dirty = 0
        stems, slots, weights = _postings_below(zip(keys, values, strict=True), size)
        arrays["stems"] = _bytes(json.dumps(stems))
        arrays["offsets"] = np.cumsum([0] + [len(part) for part in slots], dtype=np.int64)
        arrays["slots"] = np.concatenate(slots or [np.zeros(0, np.int32)])
        arrays["weights"] = np.concatenate(weights or [np.zeros(0, np.float32)])
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f"{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            with staging.open("wb") as file:
                np.savez(file, allow_pickle=False, **arrays)
            os.replace(staging, path)
        finally:
            staging.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path, tokenizer: Fts5Tokenizer, store: str) -> LexicalIndex:
        """The index ``save`` wrote. ``LexicalUnreadable`` when the file is missing,
        damaged, was made with another tokenizer or format, or from another database
        than the one named ``store``."""
        try:
            # Opened here, so a file numpy cannot read is still closed.
            with path.open("rb") as file, np.load(file, allow_pickle=False) as data:
                arrays = {name: data[name] for name in _SAVED}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise LexicalUnreadable(f"{path.name}: {exc}") from exc
        try:
            header = json.loads(arrays["header"].tobytes().decode("utf-8"))
        except ValueError as exc:
            raise LexicalUnreadable(f"{path.name}: {exc}") from exc
        expected = json.loads(_header(store))
        if not isinstance(header, dict) or any(
            header.get(key) != expected[key] for key in ("format", "tokenize", "columns")
        ):
            raise LexicalUnreadable(f"{path.name}: made with another tokenizer or format")
        # Files saved before databases had names are taken to be this one's.
        if header.get("store", store) != store:
            raise LexicalUnreadable(f"{path.name}: made from another database")
        ids, lengths, live = arrays["ids"], arrays["lengths"], arrays["live"]
        offsets, slots, weights = arrays["offsets"], arrays["slots"], arrays["weights"]
        try:
            stems = json.loads(arrays["stems"].tobytes().decode("utf-8"))
        except ValueError as exc:
            raise LexicalUnreadable(f"{path.name}: {exc}") from exc
        size = len(ids)
        if not (
            len(lengths) == len(live) == size
            and live.dtype == np.bool_
            and ids.dtype.kind == slots.dtype.kind == offsets.dtype.kind == "i"
            and isinstance(stems, list)
            and len(offsets) == len(stems) + 1
            and offsets[0] == 0
            and offsets[-1] == len(slots) == len(weights)
            and bool(np.all(np.diff(offsets) > 0))
            and (len(slots) == 0 or 0 <= int(slots.min()) <= int(slots.max()) < size)
        ):
            raise LexicalUnreadable(f"{path.name}: its arrays do not agree")
        index = cls(tokenizer)
        # An id in two slots (added again after a discard) maps to the later one.
        index._slot_of = {int(item_id): slot for slot, item_id in enumerate(ids.tolist())}
        index._size = size
        index._ids = ids.astype(np.int64)
        index._lengths = lengths.astype(np.float64)
        index._live = live.astype(bool)
        index._live_count = int(live.sum())
        index._live_length = float(lengths[live].sum())
        for n, stem in enumerate(stems):
            postings = index._postings[str(stem)] = _Postings()
            start, end = int(offsets[n]), int(offsets[n + 1])
            index._posted += end - start
            postings.chunks.append((slots[start:end], weights[start:end]))
        return index

    def add(self, rows: Iterable[LexicalRow]) -> None:
        """Index new items, and items discarded since they were indexed (tokenised
        anew: the id may now be another item's). Items held already are skipped."""
        with self._lock:
            fresh = [row for row in rows if not self._holds(row[0])]
        if not fresh:
            return
        # Tokenised outside this index's lock: searches go on meanwhile.
        counts, lengths = self._tokenizer.documents(fresh)
        with self._lock:
            self._append(fresh, counts, lengths)
            self.dirty += len(fresh)

    def discard(self, ids: Iterable[int]) -> None:
        """No longer recallable (superseded, forgotten, deleted): never found again."""
        with self._lock:
            for item_id in ids:
                slot = self._slot_of.get(item_id)
                if slot is not None and self._live[slot]:
                    self._live[slot] = False
                    self._live_count -= 1
                    self._live_length -= float(self._lengths[slot])
                    self.dirty += 1

    def search(
        self, words: Sequence[str], limit: int, *, every: bool = False
    ) -> list[tuple[int, float]]:
        """(item id, BM25 as a positive number) of the best ``limit`` items holding any
        of ``words`` (with ``every``, all of them: FTS5's AND), best first, ties by id:
        what FTS5 ranks as ``bm25()``."""
        stems = self._tokenizer.stems(words)
        if not stems or limit <= 0:
            return []
        with self._lock:
            if self._live_count == 0:
                return []
            total = float(self._live_count)
            mean_length = self._live_length / total if self._live_length > 0 else 1.0
            # Each term's (slots, share), and whether its stem was not asked before:
            # a stem asked twice counts twice in the score, as two phrases of an FTS5
            # query do, and once among the stems an item must hold for ``every``.
            parts: list[tuple[NDArray[np.int32], NDArray[np.float64], bool]] = []
            for n, stem in enumerate(stems):
                postings = self._postings.get(stem)
                if postings is None:
                    if every:
                        return []
                    continue
                slots, weights = postings.arrays()
                live = self._live[slots]
                slots, weights = slots[live], weights[live]
                if slots.size == 0:
                    if every:
                        return []
                    continue
                idf = math.log((total - slots.size + 0.5) / (slots.size + 0.5))
                idf = idf if idf > 0 else 1e-6
                norm = K1 * (1 - B + B * self._lengths[slots] / mean_length)
                parts.append(
                    (slots, idf * weights * (K1 + 1) / (weights + norm), stem not in stems[:n])
                )
            if not parts:
                return []
            # A slot's id never changes; an add may give the index a longer array.
            slot_ids = self._ids
        # Merged outside the lock: postings are only ever appended to, never changed.
        slots, values = _summed(parts, every=len(set(stems)) if every else 0)
        ids = slot_ids[slots]
        if slots.size > limit:
            # The best ``limit`` by score, plus every item tied with the last of them.
            cut = np.partition(values, slots.size - limit)[slots.size - limit]
            keep = values >= cut
            values, ids = values[keep], ids[keep]
        order = np.lexsort((ids, -values))[:limit]
        return [(int(ids[i]), float(values[i])) for i in order]

    def compact(self) -> None:
        """Join every stem's postings now (after a bulk build), not at their first search."""
        with self._lock:
            for postings in self._postings.values():
                postings.arrays()

    def _holds(self, item_id: int) -> bool:
        slot = self._slot_of.get(item_id)
        return slot is not None and bool(self._live[slot])

    def _grow(self, needed: int) -> None:
        capacity = len(self._ids)
        if needed <= capacity:
            return
        capacity = max(needed, capacity * 2, 1024)
        self._ids = np.resize(self._ids, capacity)
        self._lengths = np.resize(self._lengths, capacity)
        # Not np.resize: it would fill the new slots with copies of the old flags.
        live = np.zeros(capacity, bool)
        live[: len(self._live)] = self._live
        self._live = live

    def _append(
        self,
        rows: Sequence[LexicalRow],
        counts: Sequence[tuple[int, str, str, int]],
        lengths: dict[int, int],
    ) -> None:
        first = self._size
        slots: dict[int, int] = {}
        for item_id, _, _ in rows:
            # Another add may have indexed it while this one was tokenising.
            if not self._holds(item_id) and item_id not in slots:
                slots[item_id] = first + len(slots)
        self._size = first + len(slots)
        self._grow(self._size)
        for item_id, slot in slots.items():
            self._slot_of[item_id] = slot
            self._ids[slot] = item_id
            self._lengths[slot] = lengths.get(item_id, 0)
            self._live[slot] = True
            self._live_length += lengths.get(item_id, 0)
        self._live_count += len(slots)
        # Weighted count per (stem, item): FTS5 sums each column's hits times its weight.
        per_stem: dict[str, dict[int, float]] = {}
        for doc, stem, column, count in counts:
            at = slots.get(doc)
            if at is None:
                continue
            holders = per_stem.setdefault(stem, {})
            holders[at] = holders.get(at, 0.0) + COLUMN_WEIGHTS.get(column, 1.0) * count
        for stem, holders in per_stem.items():
            postings = self._postings.get(stem)
            if postings is None:
                postings = self._postings[stem] = _Postings()
            self._posted += len(holders)
            postings.chunks.append(
                (
                    np.fromiter(holders.keys(), np.int32, len(holders)),
                    np.fromiter(holders.values(), np.float32, len(holders)),
                )
            )


def _summed(
    parts: Sequence[tuple[NDArray[np.int32], NDArray[np.float64], bool]], *, every: int = 0
) -> tuple[NDArray[np.int32], NDArray[np.float64]]:
    """The slots the terms' postings hold, ascending, each with its shares summed; with
    ``every``, only the slots holding that many distinct stems.

    Every term's slots are ascending and distinct, so their concatenation is a few
    sorted runs, which a stable sort merges: at a million items, where a question's
    words each hold ~50,000 postings, this took 3.1 ms against 10.4 for scattering
    the shares into an array of every slot and scanning it for the ones touched.
    """
    if len(parts) == 1 and not every:
        return parts[0][0], parts[0][1]
    slots = np.concatenate([p[0] for p in parts])
    shares = np.concatenate([p[1] for p in parts])
    order = np.argsort(slots, kind="stable")
    slots, shares = slots[order], shares[order]
    starts = np.flatnonzero(np.concatenate(([True], slots[1:] != slots[:-1])))
    summed = np.add.reduceat(shares, starts)
    slots = slots[starts]
    if every:
        firsts = np.concatenate([np.full(p[0].size, p[2], np.int32) for p in parts])[order]
        held = np.add.reduceat(firsts, starts)
        slots, summed = slots[held == every], summed[held == every]
    return slots, summed


def _postings_below(
    held: Iterable[tuple[str, _Postings]], size: int
) -> tuple[list[str], list[NDArray[np.int32]], list[NDArray[np.float32]]]:
    """Each stem's postings of the slots below ``size``: the stems that have any,
    their slots and their weights."""
    stems, slots, weights = [], [], []
    for stem, postings in held:
        # The chunks as they are now: arrays() may join them under the lock meanwhile.
        chunks = tuple(postings.chunks)
        if not chunks:
            continue
        stem_slots, stem_weights = _joined(chunks)
        # Each chunk holds the slots of one add, and adds come in slot order: slots
        # at or above ``size`` are a stem's last ones.
        if stem_slots[-1] >= size:
            kept = stem_slots < size
            stem_slots, stem_weights = stem_slots[kept], stem_weights[kept]
        if stem_slots.size:
            stems.append(stem)
            slots.append(stem_slots)
            weights.append(stem_weights)
    return stems, slots, weights


class LexicalUnreadable(Exception):
    """A saved full-text index that cannot be used: the caller builds it anew."""


# Bump when what ``save`` writes changes meaning.
FORMAT = 1
_SAVED = ("header", "ids", "lengths", "live", "stems", "offsets", "slots", "weights")


def _header(store: str) -> str:
    # The stems and weights depend on the first three: a file made with others is not
    # used. Nor is one made from another database: its ids name other items.
    return json.dumps(
        {"format": FORMAT, "tokenize": TOKENIZE, "columns": COLUMN_WEIGHTS, "store": store}
    )


def _bytes(text: str) -> NDArray[np.uint8]:
    return np.frombuffer(text.encode("utf-8"), np.uint8)
