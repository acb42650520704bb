"""What ``agentgw upkeep run`` adds to a job run from the shell (issue 21): the parts the
gateway composes and the memory layer may not import.

A job run inside the gateway has the observer as its extractor (the nightly's
extraction catch-up) and the utility model for the weekly's categories,
summaries and insights, and the slot judge when ``memory.slot_judge = "llm"``
(gateway/app.py). memory/jobs/cli.py cannot build these (memory never imports
persona), so ``job_parts`` builds them here, the way the gateway does, and
memory/jobs/cli.py takes it as a hook: the same nightly from the shell reads
the same backlog.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.store import Store
    from memory.jobs.base import Extractor
    from memory.service import MemoryService

# A pass the extractor started is waited for this long before the store closes.
IDLE_S = 120.0


@asynccontextmanager
async def job_parts(
    config: Config, store: Store, service: MemoryService
) -> AsyncIterator[list[Extractor]]:
    """The extractors of a job run from the shell (the observer, when the persona loop
    is on), with the service given the gateway's utility model and slot judge."""
    # Here, not at the top: every command's parser imports this module.
    from gateway.brains import build_brain
    from gateway.context import load_persona
    from gateway.costs import CostMeter
    from gateway.supervisor import TaskSupervisor
    from gateway.zones import PersonZones
    from memory.utility import BrainUtility
    from memory.validity_llm import LLMSlotJudge
    from persona.build import build_persona_loop
    from persona.observation.backlog import observer_extractor
    from persona.observation.sink import MemorySink

    brain = build_brain(config)
    supervisor = TaskSupervisor()
    costs = await CostMeter.start(store, config)
    try:
        if brain.name != "offline":
            # As gateway/app.py: the utility model for the weekly job, the slot judge.
            service.utility = BrainUtility(brain, brain.name)
            if config.memory.slot_judge == "llm":
                service.slot_judge = LLMSlotJudge(brain)
        if not config.persona.enabled:
            yield []
            return
        persona_text = await asyncio.to_thread(
            load_persona, config.agent.persona_file, config.agent.name
        )
        loop = await asyncio.to_thread(
            build_persona_loop,
            config,
            store,
            brain,
            supervisor,
            persona_text=persona_text,
            sink=MemorySink(service),
            zones=PersonZones(store, config.zone),
            embedder=service.embedder,
            budget=costs.state,
        )
        yield [observer_extractor(loop)]
        # Each pass runs as a task of the loop: written before the store closes.
        await loop.idle(IDLE_S)
    finally:
        await supervisor.aclose()
        await costs.aclose()
        await brain.aclose()
