"""Queries embedded by ONNX Runtime: MiniLM's transformer, exported once from the local weights.

A pack embeds one short message, and torch spends most of those ~10 ms on
dispatching its ops; ONNX Runtime runs the same graph in about half, on one
thread, and holds no GIL while it does (the pack's SQL runs beside it). The
graph is exported from the model already on disk, by torch's own exporter,
into a cache folder named after the model's files and the library versions
the first time (about five seconds), and loaded from there afterwards, by
every gateway of the same user: nothing is downloaded. The exported graph is only
used after it gave the torch model's vectors on probe sentences, in this
process; otherwise the query path stays on torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import shutil
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from gateway.config import MemoryConfig

log = logging.getLogger(__name__)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
GRAPH = "model.onnx"
# The exported graph must give the torch model's vectors to this cosine.
AGREEMENT = 0.9999
PROBES = (
    "A probe sentence to compare both paths.",
    "Short one.",
    "When did I go hiking with Ana near Lisbon last May?",
)


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/agentgw/models``, else ``~/.cache/agentgw/models``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentgw" / "models"


def model_cache(memory: MemoryConfig) -> Path:
    """The folder for exported graphs: ``memory.model_cache_dir``, else ``default_cache()``."""
    return Path(memory.model_cache_dir).expanduser() if memory.model_cache_dir else default_cache()


class OnnxUnavailable(Exception):
    """The graph could not be exported, loaded or trusted; the caller stays on torch."""


def fingerprint(model_folder: Path) -> str:
    """Names the export after what made it: the model's files and the exporter's versions."""
    import onnxruntime
    import torch
    import transformers

    digest = hashlib.sha256()
    for name in sorted(os.listdir(model_folder)):
        path = model_folder / name
        if path.is_file():
            digest.update(name.encode())
            digest.update(str(path.stat().st_size).encode())
            if path.stat().st_size < 1_000_000:  # configs and vocabularies, whole
                digest.update(path.read_bytes())
    for version in (torch.__version__, transformers.__version__, onnxruntime.__version__):
        digest.update(version.encode())
    return digest.hexdigest()[:16]


# The loggers of torch's ONNX exporter and of the onnxscript optimiser it runs.
EXPORT_LOGGERS = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "onnx_ir", "onnx")


@contextlib.contextmanager
def _quiet(names: Sequence[str], *, unless_debug: logging.Logger) -> Iterator[None]:
    """Only errors from the loggers ``names`` meanwhile, unless ``unless_debug`` logs debug."""
    if unless_debug.isEnabledFor(logging.DEBUG):
        yield
        return
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _export(transformer: Any, tokenizer: Any, folder: Path) -> None:
    """Write ``folder/model.onnx`` (and its weights file) for any batch and length."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = tokenizer([PROBES[2], PROBES[1]], return_tensors="pt", padding=True)
    batch = torch.export.Dim("batch", min=1, max=1024)
    length = torch.export.Dim("length", min=2, max=int(transformer.max_seq_length))
    shapes = tuple({0: batch, 1: length} for _ in INPUTS)
    wrapper = LastHidden(transformer.auto_model).eval()
    # The exporter narrates on stdout, warns about its own internals, and its
    # optimiser logs some 85 INFO lines (torch's warnings, that torchvision is not
    # installed, go to torch's own handler): all of it unless we log at debug.
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        _quiet(EXPORT_LOGGERS, unless_debug=log),
    ):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            tuple(sample[name] for name in INPUTS),
            str(folder / GRAPH),
            input_names=list(INPUTS),
            output_names=["last_hidden_state"],
            dynamic_shapes=shapes,
            dynamo=True,
            optimize=True,
            verbose=False,
        )


class OnnxQueryEncoder:
    """Mean-pooled, normalised MiniLM vectors from an exported graph. Blocking."""

    def __init__(self, session: Any, tokenizer: Any, max_length: int) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._inputs = [i.name for i in session.get_inputs()]

    @classmethod
    def prepare(cls, transformer: Any, tokenizer: Any, cache: Path) -> OnnxQueryEncoder:
        """Load ``cache`` (exporting into it first when missing or unreadable)."""
        try:
            import onnxruntime
        except ImportError as exc:
            raise OnnxUnavailable(f"onnxruntime is not installed: {exc}") from exc
        if not (cache / GRAPH).is_file():
            staging = cache.with_name(f"{cache.name}.tmp-{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            log.info("memory: exporting the query model to %s (once)", cache)
            try:
                _export(transformer, tokenizer, staging)
            except Exception as exc:  # the exporter fails in many ways: any means torch
                shutil.rmtree(staging, ignore_errors=True)
                raise OnnxUnavailable(f"cannot export the query model: {exc}") from exc
            try:
                # A folder rename is atomic: a crash never leaves half a graph behind.
                staging.rename(cache)
            except OSError:
                # Another process finished the same export first: use theirs.
                shutil.rmtree(staging, ignore_errors=True)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            session = onnxruntime.InferenceSession(
                str(cache / GRAPH), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # ONNX Runtime's errors share no base class
            raise OnnxUnavailable(f"cannot load {cache / GRAPH}: {exc}") from exc
        return cls(session, tokenizer, int(transformer.max_seq_length))

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        batch = self._tokenizer(
            list(texts),
            return_tensors="np",
            padding=True,
            truncation=True,
            max_length=self._max_length,
        )
        feed = {name: np.asarray(batch[name], dtype=np.int64) for name in self._inputs}
        (hidden,) = self._session.run(None, feed)
        mask = np.asarray(batch["attention_mask"], dtype=np.float32)[..., None]
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.ascontiguousarray(pooled / np.clip(norms, 1e-12, None), dtype=np.float32)

    def agrees_with(self, reference: NDArray[np.float32]) -> bool:
        """Whether the probes' vectors match ``reference`` (the torch model's, same order)."""
        mine = self.embed(list(PROBES))
        return bool(np.min(np.sum(mine * reference, axis=1)) >= AGREEMENT)
