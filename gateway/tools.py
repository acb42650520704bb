"""The model's tools as the kernel sees them: a ``Toolbox`` handed in, and one round of calls.

The pipeline runs the tool loop (``tool_loop`` here, over the pipeline's stream):
the model streams,
asks for tools, gets their results, streams again, up to ``max_tool_calls``
calls per turn. What the tools do lives above the kernel (``memory/tools.py``),
handed to the pipeline as an object by ``gateway/app.py``: the kernel never
imports memory.

Everything that goes wrong with a call — an unknown tool, arguments that are not
JSON or do not fit, a tool that fails, the limit reached — becomes an error
*result for the model*, never the person's error: the model can correct itself
or answer without the tool, and the turn goes on.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gateway.brains.base import (
    BrainRequest,
    Completion,
    ToolCall,
    ToolResult,
    ToolRound,
    ToolSpec,
    Usage,
)
from gateway.errors import AgentGWError, BrainInterrupted
from gateway.prompt import TurnContext

log = logging.getLogger(__name__)


class ToolInputError(AgentGWError):
    """A call's arguments do not fit its tool: said to the model, which can try again."""

    code = "tool_input"


@dataclass(frozen=True)
class ToolAnswer:
    """What a tool gives back: ``text`` for the model (data, already sanitised), ``line``
    for the person ("looked up “marathon”: 3 found")."""

    text: str
    line: str


class Toolbox(Protocol):
    """The tools a model may call during a turn."""

    def specs(self) -> tuple[ToolSpec, ...]:
        """The tools' definitions; fixed, so they stay inside the cached prefix."""
        ...

    async def call(self, turn: TurnContext, name: str, arguments: dict[str, Any]) -> ToolAnswer:
        """Run one call; ``ToolInputError`` for arguments that do not fit."""
        ...


@dataclass(frozen=True)
class ToolRecord:
    """One call as stored with the turn (``turns.tool_calls``) and shown in the panel."""

    name: str
    arguments: str
    result: str
    line: str
    is_error: bool
    ms: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "result": self.result,
            "line": self.line,
            "error": self.is_error,
            "ms": round(self.ms, 2),
        }


def limit_note(limit: int) -> str:
    return (
        f"This turn's limit of {limit} tool calls is reached: no more tools. "
        "Answer the person now with what you have."
    )


async def run_call(
    toolbox: Toolbox, turn: TurnContext, call: ToolCall, *, allowed: bool, limit: int
) -> tuple[ToolResult, ToolRecord]:
    """One call's result for the model and its record; never raises for the call's faults."""
    started = time.perf_counter()
    known = {spec.name for spec in toolbox.specs()}
    text, line, error = "", "", True
    if not allowed:
        text, line = f"Not run. {limit_note(limit)}", f"skipped {call.name}: tool limit reached"
    elif call.name not in known:
        names = ", ".join(sorted(known))
        text = f"Error: there is no tool named {call.name!r}. The tools are: {names}."
        line = f"asked for an unknown tool {call.name!r}"
    else:
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            arguments = None
            text = f"Error: the arguments are not valid JSON ({exc.msg}). Call {call.name} again."
        if arguments is not None and not isinstance(arguments, dict):
            arguments = None
            text = f"Error: the arguments must be a JSON object. Call {call.name} again."
        if arguments is None:
            line = f"{call.name}: bad arguments"
        else:
            try:
                answer = await toolbox.call(turn, call.name, arguments)
            except ToolInputError as exc:
                text, line = f"Error: {exc}", f"{call.name}: {exc}"
            except Exception as exc:  # the tool's fault is the model's to work around
                code = exc.code if isinstance(exc, AgentGWError) else "tool_failed"
                log.warning("tool %s failed: %s: %s", call.name, code, exc, exc_info=True)
                text, line = f"Error: the tool failed ({code}).", f"{call.name} failed"
            else:
                text, line, error = answer.text, answer.line, False
    ms = (time.perf_counter() - started) * 1000
    return (
        ToolResult(call.id, text, is_error=error),
        ToolRecord(call.name, call.arguments, text, line, error, ms),
    )


def add_usage(total: Usage, more: Usage) -> Usage:
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cache_read_tokens=total.cache_read_tokens + more.cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens + more.cache_write_tokens,
    )


async def tool_loop(
    toolbox: Toolbox,
    turn: TurnContext,
    request: BrainRequest,
    limit: int,
    streamed: list[str],
    *,
    stream_round: Callable[[BrainRequest, bool], Awaitable[Completion]],
    called: Callable[[ToolRecord, str, list[ToolRecord]], Awaitable[None]],
    more_text: Callable[[str], Awaitable[None]],
    brain_name: str,
) -> Completion:
    """A turn's answer with its tool calls run in between.

    Each round streams (``stream_round(request, first_round)``, its text appended to
    ``streamed`` and published by the caller); a round that ends in tool calls gets
    them run in order (``called`` after each: the pipeline publishes, traces and
    stores it) and the model goes on. Past ``limit`` calls a call is not run: its
    result tells the model so, the result that reached the limit says it too, and the
    next request forbids tools (tool_choice none). The answer is all the text the
    person saw, every round's (a new round's text a new paragraph, ``more_text``);
    the usage is the rounds' sum.
    """
    request = replace(request, tools=toolbox.specs(), tools_allowed=limit > 0)
    rounds: list[ToolRound] = []
    records: list[ToolRecord] = []
    # A made-up tool name is one stage label, not one each (metrics labels stay few).
    known = {spec.name for spec in request.tools}
    usage = Usage()
    # One round more than the limit: the answer after the last allowed call.
    for _ in range(limit + 2):
        before = len(streamed)
        completion = await stream_round(request, not rounds)
        usage = add_usage(usage, completion.usage)
        if not completion.tool_calls or not request.tools_allowed:
            # A server that calls tools after being told not to: its text is the answer.
            return replace(completion, text="".join(streamed), usage=usage, tool_calls=())
        results: list[ToolResult] = []
        for call in completion.tool_calls:
            allowed = len(records) < limit
            result, record = await run_call(toolbox, turn, call, allowed=allowed, limit=limit)
            results.append(result)
            records.append(record)
            await called(record, f"tool:{call.name if call.name in known else 'unknown'}", records)
        if streamed[before:] and not streamed[-1].endswith("\n"):
            # The next round's text starts a new paragraph of the same reply.
            streamed.append("\n\n")
            await more_text("\n\n")
        if len(records) >= limit and results and limit_note(limit) not in results[-1].text:
            # The model is told with the last result it gets, not only by tool_choice.
            last = results[-1]
            results[-1] = replace(last, text=f"{last.text}\n\n{limit_note(limit)}")
        rounds.append(ToolRound(completion.text, completion.tool_calls, tuple(results)))
        request = replace(request, tool_rounds=tuple(rounds), tools_allowed=len(records) < limit)
    raise BrainInterrupted(f"{brain_name}: the tool loop did not end")
