"""How many new people one client address may start: a token bucket per address.

A webchat page names itself with ``?session=``, and a session never seen
before makes a new person, with their own rows and, while they are used,
their own memory indexes. Anyone who can reach ``/ws`` could mint people by
the thousand, so a new session from an address outside loopback takes one
token from that address's bucket (``webchat.new_people_burst`` tokens, one
more every 3600 / ``webchat.new_people_per_hour`` seconds); with none left
the page gets an error frame (``rate_limited``) and no person is made.
Sessions already known are never counted, and loopback (the default bind,
and the bench) is never limited.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable


def is_loopback_peer(remote: str | None) -> bool:
    """Whether a peer address is this machine (no address: a Unix socket, local too)."""
    if not remote:
        return True
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


class NewPeopleLimit:
    """At most ``burst`` new people at once per address, refilled at ``per_hour``."""

    # Buckets are dropped once full again (as good as none): checked when the table
    # has doubled since, so an address that stops costs nothing after an hour or so.
    _PRUNE_FROM = 1024

    def __init__(
        self, per_hour: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if per_hour <= 0 or burst < 1:
            raise ValueError("per_hour must be positive and burst 1 or more")
        self.per_hour = per_hour
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address: (tokens, at)
        self._prune_at = self._PRUNE_FROM

    def __len__(self) -> int:
        return len(self._buckets)

    def _tokens(self, address: str, now: float) -> float:
        tokens, at = self._buckets.get(address, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_hour / 3600.0)

    def allow(self, address: str | None) -> bool:
        """Take a token for a new person from ``address``; False when none is left."""
        if is_loopback_peer(address):
            return True
        assert address is not None  # not loopback, so an address was given
        now = self._clock()
        tokens = self._tokens(address, now)
        if tokens < 1.0:
            self._buckets[address] = (tokens, now)
            return False
        self._buckets[address] = (tokens - 1.0, now)
        if len(self._buckets) >= self._prune_at:
            self._prune(now)
        return True

    def _prune(self, now: float) -> None:
        full = [a for a in self._buckets if self._tokens(a, now) >= self.burst]
        for address in full:
            del self._buckets[address]
        self._prune_at = max(self._PRUNE_FROM, 2 * len(self._buckets))
