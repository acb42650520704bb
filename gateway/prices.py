"""Model prices: the ``budget.prices`` table, checked, and the cost of one call.

Prices are US dollars per million tokens, per model, for each kind of token the
providers bill separately: uncached input, output, cache reads and cache
writes (Anthropic's ``input_tokens`` excludes the cached ones, which come as
``cache_read_input_tokens`` / ``cache_creation_input_tokens``). A model is
found by its exact name, else by the longest table key it starts with, so
"claude-sonnet-4-5-20250929" is priced by "claude-sonnet-4-5".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gateway.errors import ConfigError

PRICE_KEYS = ("input", "output", "cache_read", "cache_write")

Prices = dict[str, dict[str, float]]

# Anthropic's list prices (USD per million tokens): cache writes (5 min) 1.25x the
# input price, cache reads 0.1x. The two "5-5" names are this project's configured
# defaults (claude.reply_model / utility_model): priced as the Sonnet and Haiku tiers.
DEFAULT_PRICES: Prices = {
    "claude-opus-4": {"input": 15.0, "output": 75.0, "cache_read": 1.5, "cache_write": 18.75},
    "claude-opus-4-5": {"input": 5.0, "output": 25.0, "cache_read": 0.5, "cache_write": 6.25},
    "claude-sonnet-4": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_write": 1.25},
    "claude-3-5-haiku": {"input": 0.8, "output": 4.0, "cache_read": 0.08, "cache_write": 1.0},
    "claude-sonnet-5-5": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75},
    "claude-haiku-5-5": {"input": 1.0, "output": 5.0, "cache_read": 0.1, "cache_write": 1.25},
}


def check_prices(key: str, value: Any) -> Prices:
    """``value`` as a price table; a ``ConfigError`` naming the first bad key otherwise."""
    if isinstance(value, str):
        raise ConfigError(f"{key}: a table of models; set it in the config file, not in a variable")
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a table of models, got {value!r}")
    table: Prices = {}
    for model, prices in value.items():
        name = f"{key}.{model}"
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(f"{key}: a model name must be a non-empty string, got {model!r}")
        if not isinstance(prices, Mapping):
            raise ConfigError(f"{name}: expected a table of {', '.join(PRICE_KEYS)}")
        unknown = sorted(set(prices) - set(PRICE_KEYS))
        if unknown:
            raise ConfigError(
                f"{name}.{unknown[0]}: unknown price; the keys are {', '.join(PRICE_KEYS)}"
            )
        missing = [k for k in PRICE_KEYS if k not in prices]
        if missing:
            raise ConfigError(f"{name}.{missing[0]}: missing (USD per million tokens)")
        row: dict[str, float] = {}
        for price_key in PRICE_KEYS:
            number = prices[price_key]
            if isinstance(number, bool) or not isinstance(number, int | float):
                raise ConfigError(
                    f"{name}.{price_key}: expected a number (USD per million tokens), "
                    f"got {number!r}"
                )
            if not math.isfinite(number) or number < 0:
                raise ConfigError(f"{name}.{price_key}: must be 0 or more, got {number}")
            row[price_key] = float(number)
        table[model] = row
    return table


def price_of(prices: Mapping[str, Mapping[str, float]], model: str) -> Mapping[str, float] | None:
    """The model's prices: its exact name, else the longest key it starts with; None."""
    if model in prices:
        return prices[model]
    best = max((key for key in prices if model.startswith(key)), key=len, default=None)
    return None if best is None else prices[best]


def cost_usd(
    prices: Mapping[str, Mapping[str, float]],
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
) -> float | None:
    """What one call cost in USD; None when the model has no price (it is then counted as 0)."""
    price = price_of(prices, model)
    if price is None:
        return None
    return (
        input_tokens * price["input"]
        + output_tokens * price["output"]
        + cache_read_tokens * price["cache_read"]
        + cache_write_tokens * price["cache_write"]
    ) / 1_000_000
