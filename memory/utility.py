"""The utility model as the weekly upkeep sees it: one small capability.

memory/ may not import persona/ (the layer rule), so the categoriser, the
summaries and the insights ask a ``UtilityModel`` — a ``Brain`` called for its
utility purpose (``BrainUtility``) in the gateway, a scripted one in tests.
Without one (``MemoryService.utility`` None) every job works without a model.
"""

from __future__ import annotations

from typing import Protocol

from gateway.brains.base import BlockKind, Brain, BrainRequest, ChatMessage, Purpose, SystemBlock


class UtilityModel(Protocol):
    @property
    def name(self) -> str:
        """The model's name, recorded with what it wrote (a summary's ``method``)."""
        ...

    async def complete(self, instructions: str, text: str, max_tokens: int) -> str:
        """The model's answer to ``text`` under ``instructions`` (temperature 0)."""
        ...


class BrainUtility:
    """A brain's utility model (``Purpose.UTILITY``) as a ``UtilityModel``."""

    def __init__(self, brain: Brain, name: str) -> None:
        self.brain = brain
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def complete(self, instructions: str, text: str, max_tokens: int) -> str:
        request = BrainRequest(
            system=(SystemBlock(BlockKind.GUIDANCE, instructions, cache=True),),
            messages=(ChatMessage("user", text),),
            purpose=Purpose.UTILITY,
            max_tokens=max_tokens,
            temperature=0.0,
        )
        completion = await self.brain.complete(request)
        return completion.text
