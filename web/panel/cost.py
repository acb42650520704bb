"""``/panel/cost``: what the turns cost (issue 22, budget-aware memory).

Spend per day and per person as inline SVG bar charts (drawn here, no script
and no CDN), the month's total against ``budget.monthly_usd``, the budget's
mode and each change of it. ``GET /api/cost`` serves the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.costs import CostMeter, CostSummary, cost_summary
from web.panel.render import gateway_of, iso, render

# The meter the app runs (set by gateway/app.py); the page reads its mode and clock.
COSTS: web.AppKey[CostMeter] = web.AppKey("cost-meter", CostMeter)

DAYS = 30
# The day chart's drawing area, in SVG units.
WIDTH, HEIGHT, BAR_GAP = 600, 160, 2


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    usd: float


def day_bars(summary: CostSummary) -> list[Bar]:
    """One bar per day with spend, scaled to the busiest day (a day without turns: none)."""
    if not summary.days:
        return []
    top = max(d.usd for d in summary.days) or 1.0
    step = WIDTH / len(summary.days)
    return [
        Bar(
            x=i * step,
            y=HEIGHT - HEIGHT * d.usd / top,
            width=max(1.0, step - BAR_GAP),
            height=HEIGHT * d.usd / top,
            label=d.day.isoformat(),
            usd=d.usd,
        )
        for i, d in enumerate(summary.days)
    ]


def person_bars(summary: CostSummary, row: int = 22) -> list[Bar]:
    """One horizontal bar per person, longest for who cost most."""
    if not summary.people:
        return []
    top = max(p.usd for p in summary.people) or 1.0
    return [
        Bar(
            x=0.0,
            y=i * row,
            width=max(1.0, (WIDTH - 200) * p.usd / top),
            height=row - 6,
            label=p.name,
            usd=p.usd,
        )
        for i, p in enumerate(summary.people)
    ]


def summary_json(summary: CostSummary) -> dict[str, Any]:
    return {
        "month": summary.month,
        "month_usd": round(summary.month_usd, 6),
        "budget_usd": summary.budget_usd,
        "mode": summary.mode,
        "days": [
            {"day": d.day.isoformat(), "usd": round(d.usd, 6), "turns": d.turns}
            for d in summary.days
        ],
        "people": [
            {
                "person_id": p.person_id,
                "name": p.name,
                "usd": round(p.usd, 6),
                "turns": p.turns,
                "tokens": p.tokens,
            }
            for p in summary.people
        ],
        "changes": [
            {
                "at": iso(c.at),
                "month": c.month,
                "previous": c.previous.value,
                "mode": c.mode.value,
                "spent_usd": c.spent_usd,
                "budget_usd": c.budget_usd,
            }
            for c in summary.changes
        ],
        "embed_calls": summary.embed_calls,
        "pack_ms_mean": round(summary.pack_ms, 2),
        "db_ms_mean": round(summary.db_ms, 2),
    }


async def summary_of(request: web.Request) -> CostSummary:
    gateway = gateway_of(request)
    meter = request.app.get(COSTS)
    return await cost_summary(
        gateway.store, meter.state if meter is not None else None, gateway.config, days=DAYS
    )


async def cost_page(request: web.Request) -> web.Response:
    summary = await summary_of(request)
    share = summary.month_usd / summary.budget_usd if summary.budget_usd > 0 else None
    return render(
        request,
        "cost.html",
        data=summary_json(summary),
        days=day_bars(summary),
        people=person_bars(summary),
        width=WIDTH,
        height=HEIGHT,
        share=share,
        summary=summary,
    )


async def cost_api(request: web.Request) -> web.Response:
    return web.json_response(summary_json(await summary_of(request)))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/cost", cost_page)
    app.router.add_get("/api/cost", cost_api)
