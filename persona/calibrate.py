"""How well the judge agrees with people: per-dimension correlation with human ratings.

The labels file is JSON Lines, one rated reply a line::

    {"reply": "...", "user_message": "...", "pack": "...",
     "hard_rules": ["Never use emojis"],
     "history": [{"role": "user", "text": "..."}],
     "ratings": {"voice": 0.8, "relational": 0.7, "groundedness": 1.0,
                 "style": 0.6, "constraints": 1.0}}

Only ``reply`` and ``ratings`` are required; a rating may leave out
dimensions. Each reply is judged, then Pearson's r is computed per dimension
(and for the composite, on lines rating all five). A dimension below the
bar (0.7) is named, so you know which scores not to act on alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from gateway.brains.base import ChatMessage
from gateway.errors import InputError
from persona.judge import DIMENSIONS, Judge, JudgeInput, SyncPolicy
from persona.state import HardRule, PersonaState

CALIBRATION_BAR = 0.7


@dataclass(frozen=True)
class Labelled:
    item: JudgeInput
    ratings: dict[str, float]


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r, or None with fewer than 3 pairs or when either side does not vary."""
    if len(xs) < 3:
        return None
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    if float(x.std()) == 0.0 or float(y.std()) == 0.0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InputError(f"{where}: a rating must be a number from 0 to 1, got {value!r}")
    return float(value)


def parse_labels(text: str, state: PersonaState, persona: str) -> list[Labelled]:
    """The labelled replies of a JSONL text; bad lines raise ``InputError`` naming the line."""
    labelled: list[Labelled] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("reply"), str):
            raise InputError(f"{where}: needs a 'reply' string")
        ratings = data.get("ratings")
        if not isinstance(ratings, dict) or not ratings:
            raise InputError(f"{where}: needs 'ratings' with at least one dimension")
        unknown = set(ratings) - set(DIMENSIONS)
        if unknown:
            raise InputError(f"{where}: unknown dimensions {sorted(unknown)}")
        rules = data.get("hard_rules", [])
        history = data.get("history", [])
        if not isinstance(rules, list) or not isinstance(history, list):
            raise InputError(f"{where}: 'hard_rules' and 'history' must be lists")
        line_state = replace(
            state,
            hard_rules=tuple(HardRule(i, str(r)) for i, r in enumerate(rules, 1)),
        )
        item = JudgeInput(
            reply=data["reply"],
            user_message=str(data.get("user_message", "")),
            pack=str(data.get("pack", "")),
            observations=str(data.get("observations", "")),
            history=tuple(
                ChatMessage("assistant" if m.get("role") == "assistant" else "user", str(m["text"]))
                for m in history
                if isinstance(m, dict) and "text" in m
            ),
            persona=persona,
            state=line_state,
        )
        labelled.append(Labelled(item, {k: _number(v, f"{where} {k}") for k, v in ratings.items()}))
    if not labelled:
        raise InputError("the labels file has no rated replies")
    return labelled


def load_labels(path: Path, state: PersonaState, persona: str) -> list[Labelled]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    return parse_labels(text, state, persona)


async def calibrate(
    labelled: Sequence[Labelled], judge: Judge, policy: SyncPolicy
) -> dict[str, Any]:
    """Judge every labelled reply and correlate the judge with the ratings."""
    pairs: dict[str, tuple[list[float], list[float]]] = {
        name: ([], []) for name in (*DIMENSIONS, "composite")
    }
    unscored = 0
    latency = 0.0
    cost = 0.0
    for entry in labelled:
        verdict = await judge.judge(entry.item)
        latency += verdict.latency_ms
        cost += verdict.cost_usd
        if verdict.scores is None:
            unscored += 1
            continue
        values = verdict.scores.as_dict()
        for name, rating in entry.ratings.items():
            pairs[name][0].append(values[name])
            pairs[name][1].append(rating)
        if set(entry.ratings) == set(DIMENSIONS):
            human = policy.composite(type(verdict.scores)(**entry.ratings))
            pairs["composite"][0].append(policy.composite(verdict.scores))
            pairs["composite"][1].append(human)
    dimensions: dict[str, dict[str, Any]] = {}
    for name, (judged, rated) in pairs.items():
        r = pearson(judged, rated)
        dimensions[name] = {
            "n": len(judged),
            "pearson_r": None if r is None else round(r, 3),
            "judge_mean": round(sum(judged) / len(judged), 3) if judged else None,
            "human_mean": round(sum(rated) / len(rated), 3) if rated else None,
        }
    below = [
        name
        for name in DIMENSIONS
        if dimensions[name]["pearson_r"] is None or dimensions[name]["pearson_r"] < CALIBRATION_BAR
    ]
    return {
        "judge": judge.name,
        "replies": len(labelled),
        "unscored": unscored,
        "dimensions": dimensions,
        "bar": CALIBRATION_BAR,
        "below_bar": below,
        "mean_latency_ms": round(latency / len(labelled), 2),
        "cost_usd": round(cost, 6),
    }


CALIBRATION_FILE = "judge-calibration.json"


def calibration_path(data_dir: str | Path) -> Path:
    """Where the last ``agentgw judge calibrate`` result is kept, for the drift page."""
    return Path(data_dir) / CALIBRATION_FILE


def save_calibration(data_dir: str | Path, result: dict[str, Any], labels: Path) -> Path:
    """Write the result with when and from which labels it was computed (atomically)."""
    path = calibration_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        **result,
        "labels": str(labels),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(record, indent=2), encoding="utf-8")
    partial.replace(path)
    return path


def load_calibration(data_dir: str | Path) -> dict[str, Any] | None:
    """The last stored calibration, or None when there is none or it cannot be read."""
    path = calibration_path(data_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "dimensions" in data else None
