"""One turn: stored inbound → context stages → compose → stream → store reply.

The inbound message is already stored when a turn gets here (the router does
that before anything else). Every failure ends in a failed turn with an error
code, published to the conversation; the user's message stays.

The person is never left without a word: a ``WAITING`` event goes out every
``waiting_notice_s`` while the model has sent nothing; the first token must come
within ``first_token_timeout_s`` and the whole answer within the turn's
deadline (the brain's retries included), else the turn fails as
``brain_timeout``. Text streamed before a reply broke off is kept with the
failed turn as its partial reply; a completion with no text fails as
``empty_reply``. All of these are retryable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.answer_stream import publish_delta, stream_answer
from gateway.brains.base import Brain, BrainRequest, Completion
from gateway.errors import (
    AgentGWError,
    BrainError,
    BrainTimeout,
    EmptyReply,
    user_message,
)
from gateway.events import (
    LogIds,
    PackSize,
    StageEvent,
    StageKind,
    StagePhase,
    StageTimeline,
    in_stage,
    in_turn,
)
from gateway.hub import ConversationHub
from gateway.messages import TurnEvent, TurnEventKind
from gateway.prompt import (
    AfterTurnStage,
    ContextStage,
    PastMessage,
    PromptDraft,
    ReadingStage,
    TurnContext,
    TurnOutcome,
    TurnReads,
)
from gateway.store import MessageRole, Store
from gateway.store.repo import (
    ClaimLost,
    StoredInbound,
    fail_turn,
    finish_turn,
    record_turn_values,
    start_turn,
)
from gateway.tools import Toolbox, ToolRecord, tool_loop
from gateway.usage import metering

log = logging.getLogger(__name__)


# The backoff of the brains' one retry layer (the anthropic SDK's and ours for
# OpenAI-compatible servers): 0.5 s doubling up to 8 s between attempts.
RETRY_INITIAL_DELAY_S = 0.5
RETRY_MAX_DELAY_S = 8.0


def automatic_deadline_s(timeout_s: float, max_retries: int) -> float:
    """Every attempt timing out, plus the longest backoff between them."""
    backoff = sum(
        min(RETRY_INITIAL_DELAY_S * 2.0**attempt, RETRY_MAX_DELAY_S)
        for attempt in range(max_retries)
    )
    return timeout_s * (max_retries + 1) + backoff


@dataclass(frozen=True)
class PipelineSettings:
    max_tokens: int
    temperature: float | None
    # One attempt of the brain (the adapters enforce it).
    timeout_s: float
    history_max_messages: int
    prompt_caching: bool = True
    # The brain's retries after a failed attempt, inside the turn's deadline.
    max_retries: int = 0
    # The whole turn's deadline; 0: automatic_deadline_s(timeout_s, max_retries).
    turn_deadline_s: float = 0.0
    # The model's first token (its retries included) must come within this; 0: no limit.
    first_token_timeout_s: float = 30.0
    # A WAITING event this often while the model has sent nothing; 0: none.
    waiting_notice_s: float = 4.0
    # The model's tool calls per turn (gateway/tools.py); past it the model is told to answer.
    max_tool_calls: int = 4

    @property
    def deadline_s(self) -> float:
        """How long a turn's model call may take, its retries and backoff included."""
        if self.turn_deadline_s > 0:
            return self.turn_deadline_s
        return automatic_deadline_s(self.timeout_s, self.max_retries)


# The usage figures a turn's END event carries, from the turn's values.
TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class TurnPipeline:
    def __init__(
        self,
        store: Store,
        brain: Brain,
        stages: Sequence[ContextStage],
        hub: ConversationHub,
        settings: PipelineSettings,
        after_stages: Sequence[AfterTurnStage] = (),
        toolbox: Toolbox | None = None,
    ) -> None:
        self.store = store
        self.brain = brain
        # Offered only to brains that speak tool calling (not the offline one).
        self.toolbox = toolbox if getattr(brain, "supports_tools", False) else None
        self.stages = tuple(stages)
        # Those that declare their store read: a turn's run in one hop (gateway/prompt.py).
        self._reading = tuple(s for s in self.stages if isinstance(s, ReadingStage))
        self.after_stages = tuple(after_stages)
        self.hub = hub
        self.settings = settings
        # Turn columns measured after a turn's last write (deliver_ms): they ride
        # along with the next turn's write instead of costing a transaction each.
        self._pending: dict[int, dict[str, Any]] = {}
        # Each running turn's stages so far (turns.stages once its after-turn stages end).
        self._timelines: dict[int, StageTimeline] = {}

    @property
    def pending_values(self) -> int:
        return len(self._pending)

    def _take_pending(self) -> dict[int, dict[str, Any]]:
        taken, self._pending = self._pending, {}
        return taken

    def _restore_pending(self, taken: dict[int, dict[str, Any]]) -> None:
        for turn_id, values in taken.items():
            self._pending.setdefault(turn_id, {}).update(values)

    async def flush(self) -> None:
        """Write the values still pending (the router calls this when no turn runs)."""
        taken = self._take_pending()
        if not taken:
            return
        try:
            await record_turn_values(self.store, taken)
        except AgentGWError:
            self._restore_pending(taken)
            raise

    async def run(
        self,
        inbound: StoredInbound,
        received_perf: float,
        answered: Callable[[], None] | None = None,
    ) -> None:
        """Answer one stored message; never raises for a failed turn (it is recorded).

        ``answered`` is called once the reply (or the failure) is stored and sent,
        before the after-turn stages: the router gives the turn's place to the next.
        """
        address = inbound.address
        # Every log line inside the turn carries its ids (gateway/events.py).
        # ... and its embedding calls and database time are counted (gateway/usage.py).
        with (
            in_turn(LogIds(inbound.turn_id, address.conversation_id, address.person_id)),
            metering(),
        ):
            await self._run(inbound, received_perf, answered)

    def _emit(
        self,
        inbound: StoredInbound,
        kind: StageKind,
        phase: StagePhase,
        stage: str | None = None,
        duration_s: float | None = None,
        code: str | None = None,
        values: dict[str, object] | None = None,
        pack: PackSize | None = None,
    ) -> None:
        name = stage or phase.value
        if duration_s is not None and kind is not StageKind.START:
            timeline = self._timelines.get(inbound.turn_id)
            if timeline is not None:
                timeline.note(kind, phase, name, duration_s, code)
        address = inbound.address
        event = StageEvent(
            kind,
            phase,
            name,
            inbound.turn_id,
            address.conversation_id,
            address.channel,
            duration_s=duration_s,
            code=code,
        )
        if values is not None and "model" in values:
            # The TURN's END: the model's usage.
            tokens = [n if isinstance(n := values.get(key), int) else 0 for key in TOKEN_KEYS]
            event = replace(
                event,
                model=str(values["model"]),
                input_tokens=tokens[0],
                output_tokens=tokens[1],
                cache_read_tokens=tokens[2],
                cache_write_tokens=tokens[3],
            )
        if pack is not None:
            event = replace(event, pack_tokens=pack.tokens, pack_items=pack.items)
        self.hub.emit(event)

    async def _run(
        self,
        inbound: StoredInbound,
        received_perf: float,
        answered: Callable[[], None] | None,
    ) -> None:
        self._timelines[inbound.turn_id] = StageTimeline(received_perf)
        try:
            await self._run_timed(inbound, received_perf, answered)
        finally:
            timeline = self._timelines.pop(inbound.turn_id, None)
            stages = [] if timeline is None else timeline.stages
            if stages:
                # Written with the next turn's write (or the router's idle flush).
                self._pending.setdefault(inbound.turn_id, {})["stages"] = stages

    async def _run_timed(
        self,
        inbound: StoredInbound,
        received_perf: float,
        answered: Callable[[], None] | None,
    ) -> None:
        self._emit(inbound, StageKind.START, StagePhase.TURN)
        self._emit(inbound, StageKind.START, StagePhase.PREPARE)
        values: dict[str, object] = {"brain": self.brain.name}
        turn: TurnContext | None = None
        request: BrainRequest | None = None
        # The reply's text as it streams: kept as a partial reply if the turn fails.
        streamed: list[str] = []
        try:
            turn = await self._begin(inbound)
            request, pack = await self._prepare(inbound, turn, values)
            outcome = await self._answer(
                inbound, request, values, received_perf, streamed, pack, turn
            )
        except TimeoutError:
            error: AgentGWError = BrainTimeout(
                f"no complete answer within {self.settings.deadline_s:g} s"
            )
            outcome = await self._fail(inbound, request, error, values, streamed)
        except AgentGWError as exc:
            outcome = await self._fail(inbound, request, exc, values, streamed)
        except Exception as exc:  # a bug must fail the turn, not hang it
            log.exception("turn %d: unexpected error", inbound.turn_id)
            error = AgentGWError(f"{exc.__class__.__name__}: {exc}")
            outcome = await self._fail(inbound, request, error, values, streamed)
        except asyncio.CancelledError:
            error = AgentGWError("the gateway is shutting down", code="interrupted")
            await asyncio.shield(self._fail(inbound, request, error, values, streamed))
            self._emit(
                inbound,
                StageKind.END,
                StagePhase.TURN,
                duration_s=time.perf_counter() - received_perf,
                code=error.code,
            )
            raise
        self._emit(
            inbound,
            StageKind.END,
            StagePhase.TURN,
            duration_s=time.perf_counter() - received_perf,
            code=outcome.error_code or "ok",
            values=values,
        )
        if answered is not None:
            answered()
        if turn is not None:
            await self._after(inbound, turn, outcome)

    async def _begin(self, inbound: StoredInbound) -> TurnContext:
        """Mark the turn generating, read its history and its number (one transaction)."""
        address = inbound.address
        pending = self._take_pending()
        try:
            started = await start_turn(
                self.store,
                inbound.turn_id,
                address.conversation_id,
                inbound.message_id,
                self.settings.history_max_messages,
                pending,
            )
        except BaseException:
            self._restore_pending(pending)
            raise
        return TurnContext(
            turn_id=inbound.turn_id,
            conversation_id=address.conversation_id,
            person_id=address.person_id,
            channel=address.channel,
            message_id=inbound.message_id,
            text=inbound.text,
            received_at=inbound.created_at,
            recent=tuple(
                PastMessage(
                    r.id,
                    "user" if r.role is MessageRole.USER else "assistant",
                    r.text,
                    r.tokens,
                    r.created_at,
                )
                for r in started.history
            ),
            turn_number=started.turn_number,
        )

    async def _prepare(
        self, inbound: StoredInbound, turn: TurnContext, values: dict[str, object]
    ) -> tuple[BrainRequest, PackSize | None]:
        draft = PromptDraft()
        if self._reading:
            draft.reads = await TurnReads.declared(self.store, self._reading, turn)
        for stage in self.stages:
            async with self._stage(inbound, StagePhase.CONTEXT, stage.name, "stage_failed"):
                draft.stage = stage.name
                await stage.apply(turn, draft)
        values["context_tokens"] = draft.sizes(turn.text)
        request = draft.compose(
            turn.text,
            max_tokens=self.settings.max_tokens,
            temperature=self.settings.temperature,
            cache=self.settings.prompt_caching,
        )
        return request, draft.pack

    async def _answer(
        self,
        inbound: StoredInbound,
        request: BrainRequest,
        values: dict[str, object],
        received_perf: float,
        streamed: list[str],
        pack: PackSize | None = None,
        turn: TurnContext | None = None,
    ) -> TurnOutcome:
        brain_start = time.perf_counter()
        values["prepare_ms"] = (brain_start - received_perf) * 1000
        self._emit(
            inbound,
            StageKind.END,
            StagePhase.PREPARE,
            duration_s=brain_start - received_perf,
            pack=pack,
        )
        self._emit(inbound, StageKind.START, StagePhase.BRAIN)
        # The deadline covers the brain's own retries: a first attempt that
        # times out must leave room for the retry that answers.
        with in_stage(StagePhase.BRAIN.value):
            completion = await asyncio.wait_for(
                self._tool_loop(inbound, turn, request, streamed, brain_start, values),
                timeout=self.settings.deadline_s,
            )
        if not completion.text.strip():
            raise EmptyReply(f"{self.brain.name}: the model's answer has no text")
        brain_done = time.perf_counter()
        values["brain_ms"] = (brain_done - brain_start) * 1000
        self._emit(inbound, StageKind.END, StagePhase.BRAIN, duration_s=brain_done - brain_start)
        self._emit(inbound, StageKind.START, StagePhase.DELIVER)
        values.update(
            model=completion.model,
            input_tokens=completion.usage.input_tokens,
            output_tokens=completion.usage.output_tokens,
            cache_read_tokens=completion.usage.cache_read_tokens,
            cache_write_tokens=completion.usage.cache_write_tokens,
        )
        pending = self._take_pending()
        try:
            reply = await finish_turn(self.store, inbound, completion.text, values, pending)
        except BaseException:
            self._restore_pending(pending)
            raise
        await self.hub.publish(
            TurnEvent(
                TurnEventKind.REPLY,
                inbound.address.conversation_id,
                inbound.message_id,
                text=completion.text,
                reply_id=reply.id,
                created_at=reply.created_at,
            )
        )
        deliver_s = time.perf_counter() - brain_done
        self._pending.setdefault(inbound.turn_id, {})["deliver_ms"] = deliver_s * 1000
        self._emit(inbound, StageKind.END, StagePhase.DELIVER, duration_s=deliver_s)
        return TurnOutcome(
            request,
            reply.id,
            completion.text,
            reply.created_at,
            written_by_model=completion.written_by_model,
        )

    async def _after(self, inbound: StoredInbound, turn: TurnContext, outcome: TurnOutcome) -> None:
        for stage in self.after_stages:
            try:
                async with self._stage(
                    inbound, StagePhase.AFTER_TURN, stage.name, "after_turn_failed"
                ):
                    await stage.after_turn(turn, outcome)
            except Exception:  # one stage failing must not stop the others
                log.exception("turn %d: after-turn stage %s failed", turn.turn_id, stage.name)

    @contextlib.asynccontextmanager
    async def _stage(
        self, inbound: StoredInbound, phase: StagePhase, name: str, fallback_code: str
    ) -> AsyncIterator[None]:
        """One stage's START, then END or ERROR (with its code) events, its log ids set."""
        self._emit(inbound, StageKind.START, phase, name)
        started = time.perf_counter()
        with in_stage(name):
            try:
                yield
            except BaseException as exc:
                code = exc.code if isinstance(exc, AgentGWError) else fallback_code
                self._emit(
                    inbound, StageKind.ERROR, phase, name, time.perf_counter() - started, code
                )
                raise
        self._emit(inbound, StageKind.END, phase, name, time.perf_counter() - started)

    async def _tool_loop(
        self,
        inbound: StoredInbound,
        turn: TurnContext | None,
        request: BrainRequest,
        streamed: list[str],
        brain_start: float,
        values: dict[str, object],
    ) -> Completion:
        """The model's answer, its tool calls run in between (``gateway.tools.tool_loop``)."""
        toolbox = self.toolbox
        if toolbox is None or turn is None:
            return await self._stream(inbound, request, streamed, brain_start)

        async def stream_round(step: BrainRequest, first_round: bool) -> Completion:
            return await self._stream(inbound, step, streamed, brain_start, first_round=first_round)

        async def called(record: ToolRecord, stage: str, records: list[ToolRecord]) -> None:
            # In the turn's stage timeline and the stage events: the call is traced.
            self._emit(
                inbound,
                StageKind.ERROR if record.is_error else StageKind.END,
                StagePhase.TOOL,
                stage,
                duration_s=record.ms / 1000,
                code="tool_error" if record.is_error else None,
            )
            log.info(
                "turn %d: tool %s%s: %s",
                inbound.turn_id,
                record.name,
                " failed" if record.is_error else "",
                record.line,
            )
            values["tool_calls"] = [r.as_dict() for r in records]
            await self.hub.publish(
                TurnEvent(
                    TurnEventKind.TOOL,
                    inbound.address.conversation_id,
                    inbound.message_id,
                    text=record.line,
                    code="error" if record.is_error else "",
                )
            )

        async def more_text(text: str) -> None:
            await self._publish_delta(inbound, text)

        return await tool_loop(
            toolbox,
            turn,
            request,
            self.settings.max_tool_calls,
            streamed,
            stream_round=stream_round,
            called=called,
            more_text=more_text,
            brain_name=self.brain.name,
        )

    async def _publish_delta(self, inbound: StoredInbound, text: str) -> None:
        await publish_delta(self.hub, inbound, text)

    async def _stream(
        self,
        inbound: StoredInbound,
        request: BrainRequest,
        streamed: list[str],
        brain_start: float,
        *,
        first_round: bool = True,
    ) -> Completion:
        """One round of the brain's answer (``gateway/answer_stream.py``)."""

        def first_token() -> None:
            self._emit(
                inbound,
                StageKind.END,
                StagePhase.BRAIN_FIRST_TOKEN,
                duration_s=time.perf_counter() - brain_start,
            )

        return await stream_answer(
            self.brain,
            self.hub,
            inbound,
            request,
            streamed,
            first_token_timeout_s=self.settings.first_token_timeout_s,
            waiting_notice_s=self.settings.waiting_notice_s,
            on_first_token=first_token,
            first_round=first_round,
        )

    async def _fail(
        self,
        inbound: StoredInbound,
        request: BrainRequest | None,
        error: AgentGWError,
        values: dict[str, object],
        streamed: list[str],
    ) -> TurnOutcome:
        if isinstance(error, ClaimLost):
            # A cluster process took the turn over (its claim had expired): that one
            # answers it and tells the pages; this answer is dropped, not a failure.
            log.warning("turn %d: %s", inbound.turn_id, error)
            return TurnOutcome(request, error_code=error.code)
        if isinstance(error, BrainError):
            log.warning("turn %d failed: %s (%s)", inbound.turn_id, error.code, error)
        else:
            log.error("turn %d failed: %s (%s)", inbound.turn_id, error.code, error)
        # What the person already saw of a reply that broke off stays theirs to see.
        partial = "".join(streamed)
        partial = partial if partial.strip() else ""
        try:
            await fail_turn(
                self.store,
                inbound.turn_id,
                error.code,
                str(error),
                values,
                partial_text=partial or None,
                claimed_by=inbound.claimed_by,
            )
        except ClaimLost as lost:
            log.warning("turn %d: %s", inbound.turn_id, lost)
            return TurnOutcome(request, error_code=lost.code)
        except AgentGWError:
            # The message itself is stored; on restart this turn shows as interrupted.
            log.exception("could not record the failure of turn %d", inbound.turn_id)
        await self.hub.publish(
            TurnEvent(
                TurnEventKind.ERROR,
                inbound.address.conversation_id,
                inbound.message_id,
                text=user_message(error),
                code=error.code,
                partial=partial,
            )
        )
        return TurnOutcome(request, error_code=error.code)
