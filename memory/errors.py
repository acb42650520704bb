"""Errors of the memory layer, under the gateway's tree.

AgentGWError
└── MemoryLayerError             the memory layer failed
    ├── EmbeddingUnavailable     the sentence model is missing or failed to load/run
    └── IndexUnavailable         an ANN index file could not be read or written
"""

from __future__ import annotations

from gateway.errors import AgentGWError


class MemoryLayerError(AgentGWError):
    code = "memory_error"


class EmbeddingUnavailable(MemoryLayerError):
    code = "embedding_unavailable"


class IndexUnavailable(MemoryLayerError):
    code = "index_unavailable"
