"""``/panel/system``: the numbers ``/metrics`` serves, for a person (and ``/api/system``).

Read from the same registry Prometheus scrapes (gateway/metrics.py), plus the
readiness checks of ``/readyz``: one source, no second count to drift apart.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aiohttp import web

from gateway.metrics import METRICS, readiness
from web.panel.render import gateway_of, render


async def system_data(request: web.Request) -> dict[str, Any]:
    gateway = gateway_of(request)
    metrics = request.app[METRICS]
    turns: dict[str, float] = defaultdict(float)
    tokens: dict[str, dict[str, float]] = defaultdict(dict)
    # (phase, stage) -> [count, sum of seconds]
    stages: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    errors: list[dict[str, Any]] = []
    gauges: dict[str, float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "agentgw_turns_total":
                turns[f"{labels['outcome']} ({labels['channel']})"] += sample.value
            elif sample.name == "agentgw_tokens_total":
                tokens[labels["model"]][labels["direction"]] = sample.value
            elif sample.name == "agentgw_turn_stage_seconds_count":
                stages[labels["phase"], labels["stage"]][0] = sample.value
            elif sample.name == "agentgw_turn_stage_seconds_sum":
                stages[labels["phase"], labels["stage"]][1] = sample.value
            elif sample.name == "agentgw_stage_errors_total" and sample.value:
                errors.append({**labels, "count": int(sample.value)})
            elif not labels and family.type == "gauge":
                gauges[sample.name.removeprefix("agentgw_")] = sample.value
    return {
        "readiness": await readiness(gateway),
        "turns": dict(sorted(turns.items())),
        "tokens": {model: dict(sorted(d.items())) for model, d in sorted(tokens.items())},
        "stages": [
            {
                "phase": phase,
                "stage": stage,
                "count": int(count),
                "mean_ms": round(total / count * 1000, 1) if count else None,
            }
            for (phase, stage), (count, total) in stages.items()
        ],
        "stage_errors": errors,
        "gauges": gauges,
    }


async def system_page(request: web.Request) -> web.Response:
    return render(request, "system.html", data=await system_data(request))


async def system_api(request: web.Request) -> web.Response:
    return web.json_response(await system_data(request))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/panel/system", system_page)
    app.router.add_get("/api/system", system_api)
