"""The memory health report: what the store holds and how it is kept, as JSON values.

The monthly job leaves it in its run's ``report``; ``agentgw memory health``
prints it; ``render_health_svg`` draws it as inline SVG charts (no scripts, no
CDN; they scale to the width of a phone).

Keys: ``generated_at``; ``items`` (active, warm, cold, archived — of the
recallable items — superseded, forgotten, total); ``by_category`` and
``by_type`` (recallable items); ``last_access_age`` (recallable items by days
since last use, or since they happened when never used); ``duplicates_merged``
(superseded items: a merge supersedes, so do newer versions of a fact — no
finer record exists yet); ``growth_per_month`` (items stored per calendar month,
the last 12); ``index_sizes`` (ANN and full-text index files, the database
file); ``pack_latency_ms`` (p50/p95/max of the packs traced in the last 30 days).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, and_, case, func, select

from gateway.store import Store
from gateway.store.db import sqlite_file
from memory.models import MemoryItem, MemoryTrace
from memory.types import ItemStatus

# Days since last use: bucket labels and their upper bounds.
AGE_BUCKETS: tuple[tuple[str, float], ...] = (
    ("< 1 d", 1),
    ("1-7 d", 7),
    ("7-30 d", 30),
    ("30-90 d", 90),
    ("90-180 d", 180),
    ("180-365 d", 365),
    ("> 1 y", float("inf")),
)
LATENCY_DAYS = 30
# At most this many of the month's traces are read for the latency figures (newest).
LATENCY_TRACES = 50_000


def _months(now: datetime, count: int) -> list[datetime]:
    """The first instants of the last ``count`` calendar months (UTC), oldest first."""
    year, month = now.year, now.month
    starts = []
    for _ in range(count):
        starts.append(datetime(year, month, 1, tzinfo=UTC))
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
    return starts[::-1]


def _between(start: datetime, end: datetime) -> list[ColumnElement[bool]]:
    return [MemoryItem.created_at >= start, MemoryItem.created_at < end]


def _counted(rows: Sequence[Any]) -> dict[str, int]:
    return {str(key): int(value) for key, value in rows}


def _file_sizes(folder: Path, suffix: str) -> tuple[int, int]:
    files = list(folder.glob(f"*{suffix}")) if folder.is_dir() else []
    return len(files), sum(f.stat().st_size for f in files if f.is_file())


async def health_report(
    store: Store, index_dir: Path, now: datetime, person_id: int | None = None
) -> dict[str, Any]:
    """The report over every person's items (or one person's)."""
    mine = [] if person_id is None else [MemoryItem.person_id == person_id]
    recallable = MemoryItem.status == ItemStatus.ACTIVE
    touched = func.coalesce(MemoryItem.last_accessed_at, MemoryItem.occurred_at)
    months = _months(now, 12)
    async with store.reader() as session:
        by_status = _counted(
            (
                await session.execute(
                    select(MemoryItem.status, func.count()).where(*mine).group_by(MemoryItem.status)
                )
            ).all()
        )
        by_tier = _counted(
            (
                await session.execute(
                    select(MemoryItem.tier, func.count())
                    .where(recallable, *mine)
                    .group_by(MemoryItem.tier)
                )
            ).all()
        )
        by_category = _counted(
            (
                await session.execute(
                    select(MemoryItem.category, func.count())
                    .where(recallable, *mine)
                    .group_by(MemoryItem.category)
                )
            ).all()
        )
        by_type = _counted(
            (
                await session.execute(
                    select(MemoryItem.type, func.count())
                    .where(recallable, *mine)
                    .group_by(MemoryItem.type)
                )
            ).all()
        )
        # One pass: how many were last touched before each bucket's lower bound.
        bounds = [now - timedelta(days=days) for _, days in AGE_BUCKETS[:-1]]
        older = (
            await session.execute(
                select(*[func.sum(case((touched < b, 1), else_=0)) for b in bounds]).where(
                    recallable, *mine
                )
            )
        ).one()
        # 32 days after a month's first day is always in the next month.
        ends = [*months[1:], _months(months[-1] + timedelta(days=32), 1)[0]]
        grown = (
            await session.execute(
                select(
                    *[
                        func.sum(case((and_(*_between(start, end)), 1), else_=0))
                        for start, end in zip(months, ends, strict=True)
                    ]
                ).where(*mine)
            )
        ).one()
        trace_where = [MemoryTrace.created_at >= now - timedelta(days=LATENCY_DAYS)]
        if person_id is not None:
            trace_where.append(MemoryTrace.person_id == person_id)
        notes = (
            await session.scalars(
                select(MemoryTrace.notes)
                .where(*trace_where)
                .order_by(MemoryTrace.id.desc())
                .limit(LATENCY_TRACES)
            )
        ).all()
    total_active = sum(by_tier.values())
    counts = [int(v or 0) for v in older]
    ages: list[dict[str, Any]] = []
    previous = total_active
    for (label, _), older_than in zip(AGE_BUCKETS, [*counts, 0], strict=True):
        ages.append({"bucket": label, "items": previous - older_than})
        previous = older_than
    ann_files, ann_bytes = _file_sizes(index_dir, ".hnsw")
    lexical_files, lexical_bytes = _file_sizes(index_dir, ".lexical.npz")
    database = sqlite_file(store.url)
    return {
        "generated_at": now.isoformat(),
        "person_id": person_id,
        "items": {
            "active": int(by_tier.get("active", 0)),
            "warm": int(by_tier.get("warm", 0)),
            "cold": int(by_tier.get("cold", 0)),
            "archived": int(by_tier.get("archived", 0)),
            "superseded": int(by_status.get("superseded", 0)),
            "forgotten": int(by_status.get("forgotten", 0)),
            "total": int(sum(by_status.values())),
        },
        "by_category": {
            (str(k) or "uncategorised"): int(v) for k, v in sorted(by_category.items())
        },
        "by_type": {str(k): int(v) for k, v in sorted(by_type.items(), key=lambda p: str(p[0]))},
        "last_access_age": ages,
        "duplicates_merged": int(by_status.get("superseded", 0)),
        "growth_per_month": [
            {"month": f"{m:%Y-%m}", "items": int(v or 0)}
            for m, v in zip(months, grown, strict=True)
        ],
        "index_sizes": {
            "ann_files": ann_files,
            "ann_bytes": ann_bytes,
            "lexical_files": lexical_files,
            "lexical_bytes": lexical_bytes,
            "database_bytes": (
                database.stat().st_size if database is not None and database.is_file() else None
            ),
        },
        "pack_latency_ms": _latency(notes),
    }


def _latency(notes: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    values = [
        float(n["timings_ms"]["pack_ms"])
        for n in notes
        if isinstance(n, dict)
        and isinstance(n.get("timings_ms"), dict)
        and isinstance(n["timings_ms"].get("pack_ms"), int | float)
    ]
    if not values:
        return {"packs": 0, "p50": None, "p95": None, "max": None, "days": LATENCY_DAYS}
    array = np.array(values)
    return {
        "packs": len(values),
        "p50": round(float(np.percentile(array, 50)), 2),
        "p95": round(float(np.percentile(array, 95)), 2),
        "max": round(float(array.max()), 2),
        "days": LATENCY_DAYS,
    }


# -- text and SVG -----------------------------------------------------------------


def render_health_text(report: dict[str, Any]) -> str:
    items = report["items"]
    lines = [
        f"memory health at {report['generated_at']}",
        "items: " + ", ".join(f"{k} {v}" for k, v in items.items()),
        "by category: " + ", ".join(f"{k} {v}" for k, v in report["by_category"].items()),
        "by type: " + ", ".join(f"{k} {v}" for k, v in report["by_type"].items()),
        "since last use: "
        + ", ".join(f"{a['bucket']} {a['items']}" for a in report["last_access_age"]),
        f"duplicates merged (superseded): {report['duplicates_merged']}",
        "growth per month: "
        + ", ".join(f"{g['month']} {g['items']}" for g in report["growth_per_month"]),
        "index sizes: " + ", ".join(f"{k} {v}" for k, v in report["index_sizes"].items()),
    ]
    latency = report["pack_latency_ms"]
    if latency["packs"]:
        lines.append(
            f"pack latency ({latency['packs']} packs, {latency['days']} d): p50 "
            f"{latency['p50']} ms, p95 {latency['p95']} ms, max {latency['max']} ms"
        )
    else:
        lines.append(f"pack latency: no packs traced in the last {latency['days']} days")
    return "\n".join(lines)


_BAR = "#3b6ea8"
_ROW = 22
_WIDTH = 360
_LABEL = 120


def _bars(title: str, rows: Sequence[tuple[str, float]], unit: str = "") -> str:
    """One horizontal bar chart; it scales to its container (a phone's width too)."""
    height = 28 + _ROW * max(len(rows), 1)
    top = max((v for _, v in rows), default=0) or 1
    span = _WIDTH - _LABEL - 60
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_WIDTH} {height}" '
        f'width="100%" style="max-width:{_WIDTH * 2}px" role="img" '
        f'aria-label="{html.escape(title)}" font-family="sans-serif" font-size="12">',
        f'<text x="0" y="16" font-weight="bold">{html.escape(title)}</text>',
    ]
    if not rows:
        parts.append('<text x="0" y="40" fill="#666">nothing yet</text>')
    for n, (label, value) in enumerate(rows):
        y = 26 + n * _ROW
        width = span * value / top
        shown = f"{value:g}{unit}"
        parts += [
            f'<text x="{_LABEL - 6}" y="{y + 14}" text-anchor="end">{html.escape(label)}</text>',
            f'<rect x="{_LABEL}" y="{y + 3}" width="{width:.1f}" height="{_ROW - 6}" '
            f'fill="{_BAR}"><title>{html.escape(label)}: {shown}</title></rect>',
            f'<text x="{_LABEL + width + 4:.1f}" y="{y + 14}">{shown}</text>',
        ]
    parts.append("</svg>")
    return "".join(parts)


def render_health_svg(report: dict[str, Any]) -> str:
    """The report as inline SVG charts, one after the other (HTML to put in a page)."""
    items = report["items"]
    latency = report["pack_latency_ms"]
    latency_rows = (
        [("p50", latency["p50"]), ("p95", latency["p95"]), ("max", latency["max"])]
        if latency["packs"]
        else []
    )
    charts = [
        _bars(
            "Items by tier and status", [(k, float(v)) for k, v in items.items() if k != "total"]
        ),
        _bars("Items by category", [(k, float(v)) for k, v in report["by_category"].items()]),
        _bars("Items by type", [(k, float(v)) for k, v in report["by_type"].items()]),
        _bars(
            "Time since last use",
            [(a["bucket"], float(a["items"])) for a in report["last_access_age"]],
        ),
        _bars(
            "Items stored per month",
            [(g["month"], float(g["items"])) for g in report["growth_per_month"]],
        ),
        _bars(f"Pack latency, last {latency['days']} days", latency_rows, " ms"),
    ]
    return '<div class="health-charts">' + "".join(charts) + "</div>"
