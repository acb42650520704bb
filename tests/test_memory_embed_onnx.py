"""The query path on ONNX Runtime: exported once from the real MiniLM, trusted only when it
gives torch's vectors, reused from its cache, exported again when the cache is damaged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memory.embed import SentenceEmbedder

pytestmark = pytest.mark.slow

TEXTS = [
    "When did I go hiking with Ana near Lisbon?",
    "What did Gina offer regarding social media?",
    "ok",
]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return SentenceEmbedder.load().embed(TEXTS)


def graph_of(models: Path) -> Path:
    (folder,) = [p for p in models.iterdir() if p.is_dir()]
    return folder / "model.onnx"


def test_queries_on_onnx_give_torchs_vectors_and_the_export_is_reused(
    tmp_path: Path, torch_vectors: np.ndarray
) -> None:
    embedder = SentenceEmbedder.load()
    assert embedder.query_runtime == "torch"
    assert embedder.use_onnx(tmp_path / "models")
    assert embedder.query_runtime == "onnx"
    for n, text in enumerate(TEXTS):
        (vector,) = embedder.embed([text])
        assert float(vector @ torch_vectors[n]) > 0.9999
    # A batch of a few is padded: padding must not change any vector.
    batch = embedder.embed(TEXTS)
    assert np.min(np.sum(batch * torch_vectors, axis=1)) > 0.9999
    # Large requests (ingest) go through ONNX too, in runs shortest first: the
    # same vectors, each row still the caller's text.
    many = embedder.embed(TEXTS * 3)
    assert many.shape == (9, torch_vectors.shape[1])
    assert np.min(np.sum(many * np.tile(torch_vectors, (3, 1)), axis=1)) > 0.9999

    graph = graph_of(tmp_path / "models")
    written = graph.stat().st_mtime_ns
    again = SentenceEmbedder.load()
    assert again.use_onnx(tmp_path / "models")
    assert graph.stat().st_mtime_ns == written, "a second start exported again"


def test_a_damaged_export_is_made_again(tmp_path: Path, torch_vectors: np.ndarray) -> None:
    embedder = SentenceEmbedder.load()
    assert embedder.use_onnx(tmp_path / "models")
    graph = graph_of(tmp_path / "models")
    graph.write_bytes(b"not an onnx graph")
    again = SentenceEmbedder.load()
    assert again.use_onnx(tmp_path / "models")
    assert graph.read_bytes() != b"not an onnx graph"
    (vector,) = again.embed([TEXTS[0]])
    assert float(vector @ torch_vectors[0]) > 0.9999
