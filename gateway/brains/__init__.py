"""Brain adapters, built from config through one explicit table."""

from __future__ import annotations

from gateway.brains.base import Brain
from gateway.brains.offline import OfflineBrain
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config
from gateway.errors import ConfigError


def resolve_kind(config: Config) -> str:
    """``auto`` becomes claude, openai or offline, by what is configured."""
    kind = config.brain.kind
    if kind != "auto":
        return kind
    if config.anthropic_api_key:
        return "claude"
    if config.openai.base_url and config.openai.model:
        return "openai"
    return "offline"


def build_brain(config: Config) -> Brain:
    kind = resolve_kind(config)
    if kind == "claude":
        from gateway.brains.claude import ClaudeBrain

        return ClaudeBrain.from_config(config)
    if kind == "openai":
        from gateway.brains.openai_compat import OpenAICompatBrain

        return OpenAICompatBrain.from_config(config)
    if kind == "offline":
        return OfflineBrain()
    if kind == "scripted":
        return ScriptedBrain(prefix=config.scripted.prefix, delay_s=config.scripted.delay_s)
    raise ConfigError(f"brain.kind: unknown brain {kind!r}")
