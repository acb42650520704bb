"""The model's tools as the kernel sees them: a ``Toolbox`` handed in, and one round of calls.

The pipeline runs the tool loop (``TurnPipeline._stream``): the model streams,
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
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.brains.base import ToolCall, ToolResult, ToolSpec
from gateway.errors import AgentGWError
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
