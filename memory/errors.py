"""Errors of the memory layer, under the gateway's tree.

AgentGWError
└── MemoryLayerError             the memory layer failed
    ├── EmbeddingUnavailable     the sentence model is missing or failed to load/run
    ├── IndexUnavailable         an ANN index file could not be read or written
    ├── PortingError             an export or import could not be done (names the file)
    └── JobProcessFailed         an upkeep job's own process ended or failed a step
"""

from __future__ import annotations

from gateway.errors import AgentGWError


class MemoryLayerError(AgentGWError):
    code = "memory_error"


class EmbeddingUnavailable(MemoryLayerError):
    code = "embedding_unavailable"


class IndexUnavailable(MemoryLayerError):
    code = "index_unavailable"


class PortingError(MemoryLayerError):
    """Bad input to ``agentgw memory import`` (or an export that cannot be written):
    the message names the file, and the line where it is known."""

    code = "porting_error"


class JobProcessFailed(MemoryLayerError):
    """The process an upkeep job runs its CPU-bound steps in (memory/jobs/offload.py)
    ended mid-step, or a step raised there an error that could not be sent back."""

    code = "job_process_failed"
