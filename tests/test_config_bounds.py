"""Every numeric config key is range-checked as its field declares (config_bounds.py).

The cases are generated from the declarations: a key added without a range fails
the first test, and each declared range is tried on both sides of each bound.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

from gateway.config import _SECTION_TYPES, load_config
from gateway.config_bounds import Bounds, bounds_of, declared
from gateway.errors import ConfigError

# A float "just outside" or "just inside" an open bound.
STEP = 0.001

NUMERIC = [
    (section, f.name, typing.get_type_hints(cls)[f.name])
    for section, cls in _SECTION_TYPES.items()
    for f in dataclasses.fields(cls)
    if typing.get_type_hints(cls)[f.name] in (int, float)
]

# Cross-field rules a value inside its own range may still break (a tier line at the
# edge of its range crosses its neighbour): keys starting so may be refused, by that
# rule's message and no other.
CROSS_FIELD = {
    "memory.tier_": "memory.tier_*: ",
    "persona.tier_": "persona.tier_*: ",
    "persona.anchor_": "persona.anchor_min_tokens: must be anchor_max_tokens or less",
}


def _cases(kind: type[Any], bounds: Bounds) -> tuple[list[Any], list[Any]]:
    """(values outside the range, values on or just inside each bound)."""
    step: Any = 1 if kind is int else STEP
    outside: list[Any] = []
    inside: list[Any] = []
    if bounds.ge is not None:
        outside.append(kind(bounds.ge) - step)
        inside.append(kind(bounds.ge))
    if bounds.gt is not None:
        outside.append(kind(bounds.gt))
        inside.append(kind(bounds.gt) + step)
    if bounds.le is not None:
        outside.append(kind(bounds.le) + step)
        inside.append(kind(bounds.le))
    if bounds.lt is not None:
        outside.append(kind(bounds.lt))
        inside.append(kind(bounds.lt) - step)
    return outside, inside


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "agentgw.toml"
    path.write_text("", encoding="utf-8")
    return path


def test_every_numeric_key_declares_a_range() -> None:
    assert len(NUMERIC) > 100
    missing = [
        f"{section}.{name}"
        for section, name, _kind in NUMERIC
        if name not in declared(_SECTION_TYPES[section])
    ]
    assert missing == []
    for section, name, _kind in NUMERIC:
        bounds = bounds_of(declared(_SECTION_TYPES[section])[name])
        assert bounds != Bounds(), f"{section}.{name} declares no bound"


@pytest.mark.parametrize(("section", "name", "kind"), NUMERIC, ids=str)
def test_each_numeric_key_refuses_values_outside_its_range_and_takes_its_bounds(
    tmp_path: Path, section: str, name: str, kind: type[Any]
) -> None:
    path = _empty(tmp_path)
    bounds = bounds_of(declared(_SECTION_TYPES[section])[name])
    outside, inside = _cases(kind, bounds)
    assert outside
    assert inside
    # The default itself is in range.
    default = getattr(load_config(path, env={}), section)
    assert getattr(default, name) not in outside
    for value in outside:
        with pytest.raises(ConfigError) as caught:
            load_config(path, env={}, overrides={section: {name: value}})
        assert str(caught.value).startswith(f"{section}.{name}: "), str(caught.value)
    for value in inside:
        refusal = ""
        try:
            config = load_config(path, env={}, overrides={section: {name: value}})
        except ConfigError as exc:
            refusal = str(exc)
        if refusal:
            rules = [
                rule for key, rule in CROSS_FIELD.items() if f"{section}.{name}".startswith(key)
            ]
            assert rules, refusal
            assert refusal.startswith(rules[0]), refusal
        else:
            assert getattr(getattr(config, section), name) == value


def test_the_keys_that_once_took_minus_one_refuse_it(tmp_path: Path) -> None:
    path = _empty(tmp_path)
    for key in (
        "server.shutdown_grace_s",
        "brain.temperature",
        "scripted.delay_s",
        "webchat.history_on_connect",
        "persona.marker_min_weight",
        "persona.trend_epsilon",
        "persona.second_sample_margin",
        "persona.utility_input_usd_per_mtok",
        "persona.utility_output_usd_per_mtok",
        "persona.anchor_min_messages",
        "persona.rebase_cooldown_turns",
        "observe.persona_min_score",
    ):
        section, _, name = key.partition(".")
        with pytest.raises(ConfigError) as caught:
            load_config(path, env={}, overrides={section: {name: -1}})
        assert str(caught.value).startswith(f"{key}: must be"), str(caught.value)


def test_a_range_refusal_names_the_key_the_range_and_the_variable(tmp_path: Path) -> None:
    env = {"AGENTGW_BRAIN__TEMPERATURE": "-1"}
    with pytest.raises(ConfigError) as caught:
        load_config(_empty(tmp_path), env=env)
    assert str(caught.value) == (
        "brain.temperature: must be in [0, 2], got -1.0 "
        "(from the environment variable AGENTGW_BRAIN__TEMPERATURE)"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(_empty(tmp_path), env={}, overrides={"persona": {"trait_alpha": 0.0}})
    assert str(caught.value) == "persona.trait_alpha: must be in (0, 1], got 0.0"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {
                "memory": {
                    f"weight_{w}": 0.0 for w in ("similarity", "priority", "recency", "frequency")
                }
            },
            "memory.weight_*: must be 0 or more and not all 0",
        ),
        (
            {"memory": {"tier_warm": 0.6}},
            "memory.tier_*: need 1 >= tier_active > tier_warm > tier_cold > 0",
        ),
        (
            {"persona": {"tier_mild": 0.7}},
            "persona.tier_*: need 1 >= tier_ok > tier_mild > tier_moderate > 0",
        ),
        (
            {"persona": {"anchor_min_tokens": 101}},
            "persona.anchor_min_tokens: must be anchor_max_tokens or less",
        ),
    ],
)
def test_the_cross_field_rules_still_hold(
    tmp_path: Path, overrides: dict[str, dict[str, Any]], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_empty(tmp_path), env={}, overrides=overrides)
    assert str(caught.value) == message
