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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


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


# Slotted: a turn emits some fifty of these, and a frozen dataclass with slots is
# built in half the time (issue 28, "CPU per turn").
@dataclass(frozen=True, slots=True)
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


class StageTimeline:
    """One turn's stages as the turn view shows them: offset from the message being
    stored, duration and (for a failed stage) its code, in milliseconds.

    ``note`` keeps the raw figures; they are formatted once, when the turn's
    ``stages`` are read to be stored (issue 28, "CPU per turn")."""

    def __init__(self, received_perf: float) -> None:
        self.received_perf = received_perf
        self._noted: list[tuple[StageKind, StagePhase, str, float, float, str | None]] = []

    def note(
        self,
        kind: StageKind,
        phase: StagePhase,
        stage: str,
        duration_s: float | None,
        code: str | None,
    ) -> None:
        if kind is StageKind.START or duration_s is None:
            return
        self._noted.append((kind, phase, stage, time.perf_counter(), duration_s, code))

    @property
    def stages(self) -> list[dict[str, Any]]:
        entries = []
        for kind, phase, stage, ended, duration_s, code in self._noted:
            ended_ms = (ended - self.received_perf) * 1000
            entry: dict[str, Any] = {
                "phase": phase.value,
                "stage": stage,
                "start_ms": round(max(0.0, ended_ms - duration_s * 1000), 2),
                "duration_ms": round(duration_s * 1000, 2),
            }
            if kind is StageKind.ERROR or phase is StagePhase.TURN:
                entry["code"] = code
            entries.append(entry)
        return entries


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
@dataclass(frozen=True, slots=True)
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
