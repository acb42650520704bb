"""Typed events for the start and end of each stage of a turn.

The pipeline emits one when a stage starts and one when it ends (or fails, with a
stage code), as Home Assistant's assist pipeline does with ``PipelineEvent``. They
travel on the ``ConversationHub`` beside the turn's deltas; the metrics
(gateway/metrics.py) and anything else that watches turns subscribe to them.

They carry no person or message text: only the turn's ids, the stage's name and
how long it took.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum


class StageKind(StrEnum):
    START = "start"
    END = "end"
    ERROR = "error"


class StagePhase(StrEnum):
    """Where in the turn a stage runs (one histogram label value each)."""

    PREPARE = "prepare"
    CONTEXT = "context"
    BRAIN_FIRST_TOKEN = "brain_first_token"
    BRAIN = "brain"
    DELIVER = "deliver"
    AFTER_TURN = "after_turn"
    # One of the model's tool calls (gateway/tools.py), inside the brain phase.
    TOOL = "tool"
    # The whole turn: its END carries the outcome ("ok" or the error code) and the usage.
    TURN = "turn"


@dataclass(frozen=True)
class StageEvent:
    kind: StageKind
    phase: StagePhase
    # The stage's own name (e.g. "memory_pack"); the phase's name for the others.
    stage: str
    turn_id: int
    conversation_id: int
    channel: str
    # Seconds the stage took (END and ERROR only).
    duration_s: float | None = None
    # ERROR: the stage's code (e.g. "after_turn_failed", an AgentGWError's code);
    # the TURN's END: "ok" or the turn's error code.
    code: str | None = None
    # The TURN's END of a turn that answered: the model and its usage.
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # PREPARE's END when the prompt carries a Memory Pack: its tokens and items kept.
    pack_tokens: int | None = None
    pack_items: int | None = None


@dataclass(frozen=True)
class PackSize:
    """The Memory Pack of one prompt: its estimated tokens and the items it kept."""

    tokens: int
    items: int


@dataclass(frozen=True)
class ObserverBacklog:
    """Messages the observer has not read yet, from its cursors (for /metrics, /readyz)."""

    messages: int
    tokens: int
    # Conversations whose unread messages reach the degraded threshold, and the largest.
    conversations_over: int
    largest_tokens: int
    threshold_tokens: int

    def as_dict(self) -> dict[str, int]:
        return {
            "messages": self.messages,
            "tokens": self.tokens,
            "conversations_over": self.conversations_over,
            "largest_tokens": self.largest_tokens,
            "threshold_tokens": self.threshold_tokens,
        }


# The turn a log record belongs to: set by the pipeline for the turn's run, copied
# onto every record by ``TurnLogFilter`` (the JSON log lines carry them as fields).
@dataclass(frozen=True)
class LogIds:
    turn_id: int
    conversation_id: int
    person_id: int | None
    stage: str | None = None


CURRENT_TURN: contextvars.ContextVar[LogIds | None] = contextvars.ContextVar(
    "agentgw_turn", default=None
)


@contextmanager
def in_turn(ids: LogIds) -> Iterator[None]:
    token = CURRENT_TURN.set(ids)
    try:
        yield
    finally:
        CURRENT_TURN.reset(token)


@contextmanager
def in_stage(stage: str) -> Iterator[None]:
    current = CURRENT_TURN.get()
    if current is None:
        yield
        return
    token = CURRENT_TURN.set(
        LogIds(current.turn_id, current.conversation_id, current.person_id, stage)
    )
    try:
        yield
    finally:
        CURRENT_TURN.reset(token)


LOG_ID_FIELDS = ("turn_id", "conversation_id", "person_id", "stage")


class TurnLogFilter(logging.Filter):
    """Copies the current turn's ids onto each record (unless a call gave them in ``extra=``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = CURRENT_TURN.get()
        if ids is not None:
            for name in LOG_ID_FIELDS:
                if not hasattr(record, name):
                    setattr(record, name, getattr(ids, name))
        return True
