"""The time zone of the people the agent talks with (``agent.timezone``).

Messages are stored in UTC, but "yesterday", "on Friday" and "in May" are
days of the person's calendar: a message sent at 6 pm in San Francisco is
already the next day in UTC. Memory resolves such words, groups turns by day
and prints dates in this zone, and the prompt's clock shows it. Empty: the
zone of the machine the gateway runs on (``TZ``, else ``/etc/timezone``, else
the ``/etc/localtime`` link), else UTC.
"""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, date, datetime, time, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class UnknownZone(ValueError):
    """The name is not a zone of the IANA database."""


def zone_named(name: str) -> tzinfo:
    """``name`` ("Europe/Lisbon", "UTC"), or the host's zone when empty."""
    name = name.strip()
    if not name:
        return host_zone()
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise UnknownZone(f"{name!r} is not a time zone name (like Europe/Lisbon)") from exc


def host_zone(etc: Path = Path("/etc")) -> tzinfo:
    """The machine's zone by its IANA name, so summer time follows the date; UTC when unknown."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    with contextlib.suppress(OSError):
        candidates.append((etc / "timezone").read_text(encoding="utf-8").strip())
    link = etc / "localtime"
    if link.is_symlink():
        target = str(link.resolve())
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    for name in candidates:
        if not name or name.startswith("/"):
            continue
        try:
            return UTC if name.upper() in ("UTC", "ETC/UTC") else ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            continue
    return UTC


def local(at: datetime, zone: tzinfo) -> datetime:
    """``at`` in ``zone``; a naive time is taken to be UTC (as the store keeps them)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.astimezone(zone)


def local_day(at: datetime, zone: tzinfo) -> date:
    return local(at, zone).date()


def day_start(day: date, zone: tzinfo) -> datetime:
    """When ``day`` begins in ``zone``, in UTC."""
    return datetime.combine(day, time.min, tzinfo=zone).astimezone(UTC)


def zone_name(zone: tzinfo) -> str:
    """ "Europe/Lisbon": a zone's IANA name ("UTC" for UTC)."""
    return getattr(zone, "key", None) or ("UTC" if zone is UTC else str(zone))


def zone_label(zone: tzinfo, at: datetime) -> str:
    """ "Europe/Lisbon, UTC+00:00": the zone's name and its offset at ``at``."""
    offset = local(at, zone).strftime("%z")
    offset = f"UTC{offset[:3]}:{offset[3:]}" if offset else "UTC"
    name = zone_name(zone)
    return name if name == "UTC" and offset == "UTC+00:00" else f"{name}, {offset}"
