"""Each person's time zone: their own when known, else the gateway's (``agent.timezone``).

A webchat page reports its browser's zone when it connects (``/ws?tz=``), so a
gateway on a server in UTC still reads "yesterday" as the person's yesterday.
Telegram says nothing of zones: there a person sends ``/timezone Europe/Lisbon``
(or links to a webchat page: one person, one zone).
"""

from __future__ import annotations

import logging
from datetime import tzinfo

from sqlalchemy import bindparam, select, update

from gateway.clock import UnknownZone, zone_named
from gateway.store import Store
from gateway.store.models import Person

log = logging.getLogger(__name__)


# Read once a person (one hop; issue 28, "CPU per turn").
_ZONE = select(Person.timezone).where(Person.id == bindparam("person_id"))


class PersonZones:
    """Zones by person id, read once from the store and kept; ``store`` None: the default."""

    def __init__(self, store: Store | None, default: tzinfo) -> None:
        self.store = store
        self.default = default
        self._known: dict[int, tzinfo] = {}
        # What the store holds for each person read or reported ("" for none).
        self._names: dict[int, str] = {}

    async def of(self, person_id: int) -> tzinfo:
        found = self._known.get(person_id)
        if found is not None:
            return found
        zone = self.default
        if self.store is not None:
            params = {"person_id": person_id}
            name = await self.store.read(lambda connection: connection.scalar(_ZONE, params))
            self._names[person_id] = name or ""
            if name:
                try:
                    zone = zone_named(name)
                except UnknownZone:
                    log.warning("person %d: stored zone %r is unknown here", person_id, name)
        self._known[person_id] = zone
        return zone

    async def report(self, person_id: int, name: str) -> bool:
        """A zone the person's device reported; stored when it is a zone and new. Whether
        it was taken."""
        name = name.strip()
        if self.store is None or not name:
            return False
        try:
            zone = zone_named(name)
        except UnknownZone:
            log.info("person %d: ignoring the reported zone %r", person_id, name)
            return False
        await self.of(person_id)  # what the store holds: a page reconnecting writes nothing
        if self._names.get(person_id) != name:
            async with self.store.session() as session:
                await session.execute(
                    update(Person).where(Person.id == person_id).values(timezone=name)
                )
            self._names[person_id] = name
        self._known[person_id] = zone
        return True
