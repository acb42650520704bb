"""Wording for configuration errors: the nearest key, where a value came from, and
which environment variable takes a secret that was written into the file.

Kept apart from ``gateway.config`` so the loader reads as loading; everything here
only builds messages for :class:`~gateway.errors.ConfigError`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from typing import Any

ENV_ORIGIN = "from the environment variable"

# A key whose name says it holds a secret (api_key, bot_token, password, ...).
_SECRET_NAME = re.compile(r"(^|_)(key|token|secret|password|passwd)(_|$)")

# Where each secret is read from instead of the file: the config key naming the
# environment variable, and that key's default. A file may rename the variable
# (``[claude] api_key_env = "MY_KEY"``), so the message names the one in force.
_SECRET_ENV_KEYS: dict[str, tuple[str, str, str]] = {
    # top-level field or section -> (section, *_env key, default variable)
    "anthropic_api_key": ("claude", "api_key_env", "ANTHROPIC_API_KEY"),
    "claude": ("claude", "api_key_env", "ANTHROPIC_API_KEY"),
    "openai_api_key": ("openai", "api_key_env", "OPENAI_API_KEY"),
    "openai": ("openai", "api_key_env", "OPENAI_API_KEY"),
    "telegram_bot_token": ("telegram", "token_env", "TELEGRAM_BOT_TOKEN"),
    "telegram": ("telegram", "token_env", "TELEGRAM_BOT_TOKEN"),
    "telegram_webhook_secret": ("telegram", "webhook_secret_env", "TELEGRAM_WEBHOOK_SECRET"),
}


def nearest(name: str, choices: Collection[str]) -> str | None:
    """The choice closest to a mistyped ``name`` (``prot`` -> ``port``), if any is close."""
    found = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, choices: Collection[str], shown: str = "{}") -> str:
    """`` — did you mean X?`` for the nearest choice, or nothing."""
    match = nearest(name, choices)
    return f" — did you mean {shown.format(match)}?" if match else ""


def origin_note(env_name: str | None) -> str:
    return f" ({ENV_ORIGIN} {env_name})" if env_name else ""


def is_secret_name(key: str) -> bool:
    # *_env keys name a variable and hold no secret themselves.
    return not key.endswith("_env") and _SECRET_NAME.search(key) is not None


def secret_refusal(
    field: str, key: str | None, source: str, raw: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """The refusal for a secret given as ``field`` (a top-level name) or
    ``field.key`` (a key of section ``field``) in ``source`` (the config file, or
    an ``AGENTGW_*`` variable), naming the environment variable that takes it;
    None when it is not a secret this gateway reads. Never echoes the value.
    """
    if key is None:
        if field == "anthropic_base_url":
            return f"{field}: not read from {source}; set claude.base_url or ANTHROPIC_BASE_URL"
        lookup = field
    elif not is_secret_name(key):
        return None
    else:
        lookup = "telegram_webhook_secret" if field == "telegram" and "secret" in key else field
    where = _SECRET_ENV_KEYS.get(lookup)
    if where is None:
        return None
    section, env_key, default = where
    named = raw.get(section, {}).get(env_key, default)
    variable = named if isinstance(named, str) and named else default
    name = field if key is None else f"{field}.{key}"
    return (
        f"{name}: secrets are not read from {source}; put it in the environment "
        f"variable {variable} instead (its name is set by {section}.{env_key})"
    )
