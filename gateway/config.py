"""Typed, validated, immutable configuration.

Sources, later ones winning: the built-in defaults, ``agentgw.toml`` (or the
file given with ``--config``), then ``AGENTGW_<SECTION>__<KEY>`` environment
variables. Secrets are never read from the file: the Anthropic key comes from
``ANTHROPIC_API_KEY`` (or the variable named by ``claude.api_key_env``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from gateway.errors import ConfigError

BrainKind = Literal["auto", "claude", "openai", "offline", "scripted"]
ENV_PREFIX = "AGENTGW_"


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    # Required when host is not a loopback address; then every page, the
    # WebSocket and the API ask for it. Prefer AGENTGW_SERVER__ACCESS_TOKEN.
    access_token: str = ""
    # How long shutdown waits for turns in flight before cancelling them.
    shutdown_grace_s: float = 10.0


@dataclass(frozen=True)
class StoreConfig:
    # Folder for the SQLite database and the index files.
    data_dir: str = "./data"
    # SQLAlchemy async URL; empty means sqlite+aiosqlite in data_dir.
    url: str = ""
    echo: bool = False


@dataclass(frozen=True)
class BrainConfig:
    # auto: claude when an Anthropic key is set, else openai when a base URL
    # is set, else offline (answers honestly that no model is configured).
    kind: BrainKind = "auto"
    reply_max_tokens: int = 1024
    utility_max_tokens: int = 512
    timeout_s: float = 60.0
    # Retries on 429 / 5xx / overloaded, with capped exponential backoff.
    max_retries: int = 2
    temperature: float = 0.7


@dataclass(frozen=True)
class ClaudeConfig:
    reply_model: str = "claude-sonnet-4-5"
    utility_model: str = "claude-haiku-4-5"
    api_key_env: str = "ANTHROPIC_API_KEY"
    # Empty: ANTHROPIC_BASE_URL if set, else the SDK's default.
    base_url: str = ""
    prompt_caching: bool = True


@dataclass(frozen=True)
class OpenAIConfig:
    # An OpenAI-compatible server: Ollama (http://127.0.0.1:11434/v1),
    # llama.cpp server, vLLM. Empty disables this brain.
    base_url: str = ""
    model: str = ""
    # Empty: same as model.
    utility_model: str = ""
    api_key_env: str = "OPENAI_API_KEY"


@dataclass(frozen=True)
class ScriptedConfig:
    # Only for tests and benchmarks: replies "<prefix><the user's text>".
    prefix: str = "You said: "
    delay_s: float = 0.0


@dataclass(frozen=True)
class AgentConfig:
    name: str = "Ada"
    # Markdown persona (the agent's core identity); empty: the bundled default.
    persona_file: str = ""


@dataclass(frozen=True)
class ContextConfig:
    # Token budget of the conversation history put in the prompt.
    history_tokens: int = 3000
    # Messages read from the store to fill that budget.
    history_max_messages: int = 200


@dataclass(frozen=True)
class WebchatConfig:
    # Frames above this get an error frame; the connection stays open.
    max_frame_bytes: int = 65536
    max_message_chars: int = 8000
    # Messages a person may send per minute over one connection.
    rate_per_minute: int = 30
    # Messages sent to a (re)connecting page.
    history_on_connect: int = 100


@dataclass(frozen=True)
class LogConfig:
    level: str = "INFO"


@dataclass(frozen=True)
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    brain: BrainConfig = field(default_factory=BrainConfig)
    claude: ClaudeConfig = field(default_factory=ClaudeConfig)
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    scripted: ScriptedConfig = field(default_factory=ScriptedConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    webchat: WebchatConfig = field(default_factory=WebchatConfig)
    log: LogConfig = field(default_factory=LogConfig)

    # Secrets and values taken from the environment at load, not from the file.
    anthropic_api_key: str = field(default="", repr=False)
    anthropic_base_url: str = ""
    openai_api_key: str = field(default="", repr=False)

    @property
    def data_dir(self) -> Path:
        return Path(self.store.data_dir)

    @property
    def database_url(self) -> str:
        if self.store.url:
            return self.store.url
        return f"sqlite+aiosqlite:///{self.data_dir / 'agentgw.db'}"

    @property
    def is_loopback(self) -> bool:
        return is_loopback_host(self.server.host)

    def replace(self, **sections: Any) -> Config:
        """A copy with whole sections or fields replaced (for tests and CLI flags)."""
        return dataclasses.replace(self, **sections)


SECRET_FIELDS = ("anthropic_api_key", "anthropic_base_url", "openai_api_key")


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_config(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """Load, merge and validate the configuration.

    ``path`` None means ``./agentgw.toml`` when it exists. ``overrides`` are
    applied last (CLI flags), as ``{"server": {"port": 9000}}``.
    """
    environ = os.environ if env is None else env
    raw: dict[str, dict[str, Any]] = {}
    if path is None:
        default = Path("agentgw.toml")
        path = default if default.exists() else None
    elif not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    if path is not None:
        try:
            loaded = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        for section, values in loaded.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{section}: expected a [{section}] table")
            raw[section] = dict(values)
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        section, _, key = name[len(ENV_PREFIX) :].partition("__")
        raw.setdefault(section.lower(), {})[key.lower()] = value
    for section, values in (overrides or {}).items():
        raw.setdefault(section, {}).update(values)

    sections: dict[str, Any] = {}
    section_types = typing.get_type_hints(Config)
    for section, values in raw.items():
        cls = section_types.get(section)
        if section in SECRET_FIELDS or cls is None or not dataclasses.is_dataclass(cls):
            raise ConfigError(f"unknown config section [{section}]")
        sections[section] = _build_section(section, typing.cast(type[Any], cls), values)

    config = Config(**sections)
    claude_key = environ.get(config.claude.api_key_env, "")
    config = dataclasses.replace(
        config,
        anthropic_api_key=claude_key,
        anthropic_base_url=config.claude.base_url or environ.get("ANTHROPIC_BASE_URL", ""),
        openai_api_key=environ.get(config.openai.api_key_env, ""),
    )
    _validate(config)
    return config


def _build_section(section: str, cls: type[Any], values: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in hints:
            raise ConfigError(f"unknown config key {section}.{key}")
        kwargs[key] = _coerce(f"{section}.{key}", hints[key], value)
    return cls(**kwargs)


def _coerce(key: str, annotation: Any, value: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Literal:
        choices = get_args(annotation)
        if value not in choices:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, choices))}")
        return value
    if origin in (types.UnionType, typing.Union):
        raise ConfigError(f"{key}: unsupported type")  # no optional keys: defaults say it
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from exc
    if annotation is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{key}: expected a number, got {value!r}") from exc
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (item_type, _ellipsis) = get_args(annotation)
        return tuple(
            _coerce(key, item_type, item.strip() if isinstance(item, str) else item)
            for item in items
            if item != ""
        )
    raise ConfigError(f"{key}: unsupported type {annotation!r}")


def _validate(config: Config) -> None:
    positive: dict[str, float] = {
        "server.port": config.server.port,
        "brain.reply_max_tokens": config.brain.reply_max_tokens,
        "brain.utility_max_tokens": config.brain.utility_max_tokens,
        "brain.timeout_s": config.brain.timeout_s,
        "context.history_tokens": config.context.history_tokens,
        "context.history_max_messages": config.context.history_max_messages,
        "webchat.max_frame_bytes": config.webchat.max_frame_bytes,
        "webchat.max_message_chars": config.webchat.max_message_chars,
        "webchat.rate_per_minute": config.webchat.rate_per_minute,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{key}: must be positive, got {value}")
    if not 0 < config.server.port < 65536:
        raise ConfigError(f"server.port: {config.server.port} is not a TCP port")
    if config.brain.max_retries < 0:
        raise ConfigError("brain.max_retries: must be 0 or more")
    if config.log.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"log.level: {config.log.level!r} is not DEBUG, INFO, WARNING or ERROR")
    if config.brain.kind == "claude" and not config.anthropic_api_key:
        raise ConfigError(f"brain.kind: claude needs an API key in ${config.claude.api_key_env}")
    if config.brain.kind == "openai" and not (config.openai.base_url and config.openai.model):
        raise ConfigError("brain.kind: openai needs openai.base_url and openai.model")
    if config.openai.base_url and not config.openai.base_url.startswith(("http://", "https://")):
        raise ConfigError(f"openai.base_url: {config.openai.base_url!r} is not an http(s) URL")
    if config.agent.persona_file and not Path(config.agent.persona_file).is_file():
        raise ConfigError(f"agent.persona_file: {config.agent.persona_file} is not a file")
    if not config.is_loopback and not config.server.access_token:
        raise ConfigError(
            f"server.access_token: required when server.host is {config.server.host!r} "
            "(not loopback); set AGENTGW_SERVER__ACCESS_TOKEN"
        )
