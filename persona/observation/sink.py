"""The memory layer's sink: observations become memory items the pack can recall."""

from __future__ import annotations

from memory import repo
from memory.repo import NewItem
from memory.service import MemoryService
from memory.types import ItemStatus, ItemType
from persona.observation.types import MEMORY_TYPE, Observation, Priority

_PRIORITY = {Priority.HIGH: 0.8, Priority.MEDIUM: 0.5, Priority.LOW: 0.3}


class MemorySink:
    """The memory layer's side of ``persona.observation.types.ObservationSink``."""

    def __init__(self, service: MemoryService) -> None:
        self.service = service

    async def observation_added(
        self, observation_id: int, person_id: int, observation: Observation
    ) -> int | None:
        # What the person asked to forget (and the request itself) must not come back this way.
        if await repo.forgotten_messages(
            self.service.store, person_id, observation.source_message_ids
        ):
            return None
        (item_id,) = await self.service.add_items(
            [
                NewItem(
                    person_id=person_id,
                    type=ItemType(MEMORY_TYPE[observation.category]),
                    content=observation.text,
                    occurred_at=observation.observed_at,
                    author="observer",
                    source_message_ids=observation.source_message_ids,
                    observation_id=observation_id,
                    priority=_PRIORITY[observation.priority],
                    refers_start=observation.referred_on,
                    refers_end=observation.referred_on,
                )
            ]
        )
        return item_id

    async def observation_retired(self, observation_id: int, memory_item_id: int | None) -> None:
        if memory_item_id is not None:
            await self.service.retire(memory_item_id, ItemStatus.SUPERSEDED)
