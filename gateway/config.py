"""Typed, validated, immutable configuration.

Sources, later ones winning: the built-in defaults, the config file (the one
given with ``--config``, else the first of ``./agentgw.toml``,
``$XDG_CONFIG_HOME/agentgw/agentgw.toml`` and ``/etc/agentgw/agentgw.toml``),
then ``AGENTGW_<SECTION>__<KEY>`` environment variables. Secrets are never read
from the file: the Anthropic key comes from ``ANTHROPIC_API_KEY`` (or the
variable named by ``claude.api_key_env``), and every secret variable ``NAME``
may instead be ``NAME_FILE``, the path of a file holding it (Docker and
Kubernetes secrets, systemd credentials).
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import logging
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from gateway import config_hints as hints
from gateway.clock import UnknownZone, zone_named
from gateway.config_bounds import (
    check_value,
)
from gateway.config_core import (
    AgentConfig,
    BrainConfig,
    BrainKind,
    ClaudeConfig,
    ContextConfig,
    LinksConfig,
    LogConfig,
    OpenAIConfig,
    ScriptedConfig,
    ServerConfig,
    StoreConfig,
    TelegramConfig,
    ToolsConfig,
    VoiceConfig,
    WebchatConfig,
)
from gateway.config_memory import (
    BudgetConfig,
    ContinuityConfig,
    CpuWorkKind,
    EmbedderKind,
    JudgeKind,
    LessonExtractor,
    LessonsConfig,
    MemoryConfig,
    ObserveConfig,
    ObserverKind,
    PersonaConfig,
    QueryRuntime,
    SlotJudgeKind,
    TriggersConfig,
    UpkeepConfig,
    UpkeepJobsConfig,
    UpkeepSchedule,
)
from gateway.errors import ConfigError
from gateway.prices import Prices, check_prices

# The sections live in config_core.py and config_memory.py; callers import them from here.
__all__ = [
    "AgentConfig",
    "BrainConfig",
    "BrainKind",
    "BudgetConfig",
    "ClaudeConfig",
    "Config",
    "ConfigError",
    "ContextConfig",
    "ContinuityConfig",
    "CpuWorkKind",
    "EmbedderKind",
    "JudgeKind",
    "LessonExtractor",
    "LessonsConfig",
    "LinksConfig",
    "LogConfig",
    "MemoryConfig",
    "ObserveConfig",
    "ObserverKind",
    "OpenAIConfig",
    "PersonaConfig",
    "QueryRuntime",
    "ScriptedConfig",
    "ServerConfig",
    "SlotJudgeKind",
    "StoreConfig",
    "TelegramConfig",
    "ToolsConfig",
    "TriggersConfig",
    "UpkeepConfig",
    "UpkeepJobsConfig",
    "UpkeepSchedule",
    "VoiceConfig",
    "WebchatConfig",
    "load_config",
]

ENV_PREFIX = "AGENTGW_"


log = logging.getLogger(__name__)


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
    voice: VoiceConfig = field(default_factory=VoiceConfig)
    telegram: TelegramConfig = field(default_factory=TelegramConfig)
    links: LinksConfig = field(default_factory=LinksConfig)
    persona: PersonaConfig = field(default_factory=PersonaConfig)
    observe: ObserveConfig = field(default_factory=ObserveConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    log: LogConfig = field(default_factory=LogConfig)
    lessons: LessonsConfig = field(default_factory=LessonsConfig)
    triggers: TriggersConfig = field(default_factory=TriggersConfig)
    upkeep: UpkeepConfig = field(default_factory=UpkeepConfig)
    upkeep_jobs: UpkeepJobsConfig = field(default_factory=UpkeepJobsConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    continuity: ContinuityConfig = field(default_factory=ContinuityConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)

    # Secrets and values taken from the environment at load, not from the file.
    anthropic_api_key: str = field(default="", repr=False)
    anthropic_base_url: str = ""
    openai_api_key: str = field(default="", repr=False)
    telegram_bot_token: str = field(default="", repr=False)
    telegram_webhook_secret: str = field(default="", repr=False)

    @property
    def data_dir(self) -> Path:
        return Path(self.store.data_dir)

    @functools.cached_property
    def zone(self) -> tzinfo:
        """``agent.timezone`` as a zone (checked at load); the machine's is read once."""
        return zone_named(self.agent.timezone)

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


SECRET_FIELDS = (
    "anthropic_api_key",
    "anthropic_base_url",
    "openai_api_key",
    "telegram_bot_token",
    "telegram_webhook_secret",
)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Keys an older release read, and what took their place: ignored with a warning.
RETIRED_KEYS: dict[str, str] = {
    "memory.stale_days": "[stale] follows the per-category [upkeep_jobs] ttl_days_* now",
}

CONFIG_FILE_NAME = "agentgw.toml"
# The system-wide place (a module constant so tests can point it elsewhere).
SYSTEM_CONFIG_DIR = Path("/etc/agentgw")
SECRET_FILE_SUFFIX = "_FILE"
ACCESS_TOKEN_ENV = "AGENTGW_SERVER__ACCESS_TOKEN"


def config_search_path(environ: Mapping[str, str]) -> tuple[Path, ...]:
    """Where a config file is looked for without ``--config``, first match wins.

    The working directory first (a checkout, a container's workdir), then the
    user's XDG config folder, then the system's, as other Unix daemons do.
    """
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if not Path(xdg).is_absolute():  # the XDG spec: a relative value is ignored
        home = environ.get("HOME", "")
        xdg = str(Path(home) / ".config") if home else str(Path.home() / ".config")
    return (
        Path(CONFIG_FILE_NAME),
        Path(xdg) / "agentgw" / CONFIG_FILE_NAME,
        SYSTEM_CONFIG_DIR / CONFIG_FILE_NAME,
    )


def find_config_file(environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file ``load_config`` reads when no path is given, or None."""
    for candidate in config_search_path(os.environ if environ is None else environ):
        if candidate.is_file():
            return candidate
    return None


def secret_from_env(environ: Mapping[str, str], name: str) -> str:
    """``$NAME``, or the content of the file ``$NAME_FILE`` names ("" when neither is set).

    Docker and Kubernetes mount secrets as files, and systemd's ``LoadCredential=``
    puts them in ``$CREDENTIALS_DIRECTORY``: a file keeps the secret out of
    ``docker inspect`` and ``/proc/<pid>/environ``. The trailing newline an editor
    or ``echo`` leaves is dropped; an empty file is an unset secret (so compose.yaml
    can declare the Anthropic key's secret for those who have one).
    """
    file_variable = name + SECRET_FILE_SUFFIX
    path = environ.get(file_variable, "")
    if not path:
        return environ.get(name, "")
    if environ.get(name, ""):
        raise ConfigError(f"${name} and ${file_variable} are both set; keep one of them")
    try:
        value = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"${file_variable}: cannot read {path}: {reason}") from exc
    return value


def load_config(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """Load, merge and validate the configuration.

    ``path`` None means the first file of ``config_search_path`` that exists.
    ``overrides`` are applied last (CLI flags), as ``{"server": {"port": 9000}}``.
    """
    environ = os.environ if env is None else env
    raw: dict[str, dict[str, Any]] = {}
    from_file: set[str] = set()
    if path is None:
        path = find_config_file(environ)
    elif not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    if path is not None:
        try:
            loaded = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        for section, values in loaded.items():
            if section in SECRET_FIELDS:
                raise ConfigError(
                    hints.secret_refusal(section, None, str(path), _tables(loaded))
                    or f"{section}: not read from {path}; set it in the environment"
                )
            if not isinstance(values, dict):
                raise ConfigError(f"{section}: expected a [{section}] table")
            raw[section] = dict(values)
            from_file.add(section)
    # Which environment variable set each value, to name it when the value is refused.
    origins: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        if name == ACCESS_TOKEN_ENV + SECRET_FILE_SUFFIX:
            continue  # read just below, as a file
        section, _, key = name[len(ENV_PREFIX) :].partition("__")
        raw.setdefault(section.lower(), {})[key.lower()] = value
        origins[f"{section.lower()}.{key.lower()}"] = name
        origins.setdefault(section.lower(), name)
    if access_token := secret_from_env(environ, ACCESS_TOKEN_ENV):
        raw.setdefault("server", {})["access_token"] = access_token
    for section, values in (overrides or {}).items():
        raw.setdefault(section, {}).update(values)
        for key in values:
            origins.pop(f"{section}.{key}", None)
    for dotted, successor in RETIRED_KEYS.items():
        section, _, key = dotted.partition(".")
        if raw.get(section, {}).pop(key, None) is not None:
            # A config written for an older release still starts; the key does nothing.
            log.warning("config: %s is no longer read: %s", dotted, successor)
    for section, values in raw.items():
        for key in values:
            if key in _section_keys(section):
                continue
            env_name = origins.get(f"{section}.{key}")
            source = f"the environment variable {env_name}" if env_name else str(path)
            refusal = hints.secret_refusal(section, key, source, raw)
            if refusal is not None:
                raise ConfigError(refusal)

    sections: dict[str, Any] = {}
    for section, values in raw.items():
        cls = _SECTION_TYPES.get(section)
        if cls is None:
            from_env = None if section in from_file else origins.get(section)
            raise ConfigError(
                f"unknown config section [{section}]{hints.origin_note(from_env)}"
                + hints.did_you_mean(section, _SECTION_TYPES, "[{}]")
            )
        sections[section] = _build_section(section, cls, values, origins)

    config = Config(**sections)
    config = dataclasses.replace(
        config,
        anthropic_api_key=secret_from_env(environ, config.claude.api_key_env),
        anthropic_base_url=config.claude.base_url or environ.get("ANTHROPIC_BASE_URL", ""),
        openai_api_key=secret_from_env(environ, config.openai.api_key_env),
        telegram_bot_token=secret_from_env(environ, config.telegram.token_env),
        telegram_webhook_secret=secret_from_env(environ, config.telegram.webhook_secret_env),
    )
    try:
        _validate(config)
        _validate_telegram_and_links(config)
        _validate_persona(config)
        _validate_memory(config.memory)
        _validate_upkeep(config)
    except ConfigError as exc:
        # "server.port: must be ..." -> name the variable when that key came from one.
        key = str(exc).partition(":")[0]
        if key in origins:
            raise ConfigError(f"{exc}{hints.origin_note(origins[key])}") from exc
        raise
    return config


# The config sections, by name; a section is a frozen dataclass field of Config.
_SECTION_TYPES: dict[str, type[Any]] = {
    f.name: typing.cast(type[Any], hint)
    for f in dataclasses.fields(Config)
    if dataclasses.is_dataclass(hint := typing.get_type_hints(Config)[f.name])
}


def _tables(loaded: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {name: value for name, value in loaded.items() if isinstance(value, dict)}


def _section_keys(section: str) -> frozenset[str]:
    cls = _SECTION_TYPES.get(section)
    return frozenset() if cls is None else frozenset(f.name for f in dataclasses.fields(cls))


def _validate_memory(memory: MemoryConfig) -> None:
    weights = (
        memory.weight_similarity,
        memory.weight_priority,
        memory.weight_recency,
        memory.weight_frequency,
    )
    # Each weight's range is declared on its field; together they must not all be 0.
    if sum(weights) <= 0:
        raise ConfigError("memory.weight_*: must be 0 or more and not all 0")
    if not memory.tier_active > memory.tier_warm > memory.tier_cold:
        raise ConfigError("memory.tier_*: need 1 >= tier_active > tier_warm > tier_cold > 0")
    if memory.embedding_model and not Path(memory.embedding_model).is_dir():
        raise ConfigError(f"memory.embedding_model: {memory.embedding_model} is not a folder")


def _validate_upkeep(config: Config) -> None:
    from gateway.schedule import CronSchedule

    for item in dataclasses.fields(UpkeepSchedule):
        expression = getattr(config.upkeep.schedule, item.name)
        if expression.strip():
            CronSchedule.parse(f"upkeep.schedule.{item.name}", expression, config.zone)


def _validate_persona(config: Config) -> None:
    persona = config.persona
    weights = (
        persona.weight_voice,
        persona.weight_relational,
        persona.weight_groundedness,
        persona.weight_style,
        persona.weight_constraints,
    )
    if sum(weights) <= 0:
        raise ConfigError("persona.weight_*: must be 0 or more and not all 0")
    if not persona.tier_ok > persona.tier_mild > persona.tier_moderate:
        raise ConfigError("persona.tier_*: need 1 >= tier_ok > tier_mild > tier_moderate > 0")
    if persona.anchor_min_tokens > persona.anchor_max_tokens:
        raise ConfigError("persona.anchor_min_tokens: must be anchor_max_tokens or less")
    if persona.exemplars_file and not Path(persona.exemplars_file).is_file():
        raise ConfigError(f"persona.exemplars_file: {persona.exemplars_file} is not a file")


def _build_section(
    section: str, cls: type[Any], values: Mapping[str, Any], origins: Mapping[str, str]
) -> Any:
    types_of = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{section}.{key}"
        from_env = hints.origin_note(origins.get(name))
        if key not in types_of:
            raise ConfigError(
                f"unknown key {name}{from_env}"
                + hints.did_you_mean(key, types_of, f"{section}.{{}}")
            )
        try:
            kwargs[key] = _coerce(name, types_of[key], value)
            check_value(name, cls, key, kwargs[key])
        except ConfigError as exc:
            if not from_env:
                raise
            raise ConfigError(f"{exc}{from_env}") from exc
    return cls(**kwargs)


def _coerce(key: str, annotation: Any, value: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Literal:
        choices = get_args(annotation)
        if value not in choices:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, choices))}")
        return value
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        # A table inside a section ([upkeep.schedule]): its keys are checked as a section's.
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a table, [{key}] in the config file")
        return _build_section(key, annotation, value, {})
    if annotation == Prices:
        return check_prices(key, value)
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
        if isinstance(value, str):
            # From the environment: comma-separated, spaces around items dropped.
            items: Any = [item.strip() for item in value.split(",")]
        else:
            # A TOML list is taken as written: a stop sequence may be "\n".
            items = value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (item_type, _ellipsis) = get_args(annotation)
        return tuple(_coerce(key, item_type, item) for item in items if item != "")
    raise ConfigError(f"{key}: unsupported type {annotation!r}")


def _validate(config: Config) -> None:
    try:
        zone_named(config.agent.timezone)
    except UnknownZone as exc:
        raise ConfigError(f"agent.timezone: {exc}") from exc
    if config.store.cluster and not config.database_url.startswith("postgresql"):
        raise ConfigError(
            "store.cluster: needs a PostgreSQL store.url (postgresql+asyncpg://...); "
            "a SQLite store serves one gateway process"
        )
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
            f"(not loopback); set AGENTGW_SERVER__ACCESS_TOKEN, or the path of a file "
            f"holding it in AGENTGW_SERVER__ACCESS_TOKEN_FILE ({MAKE_TOKEN})"
        )
    if config.server.access_token:
        _validate_token(config.server.access_token)
    for entry in config.server.allowed_hosts:
        if entry != "*" and not _HOST_ENTRY.fullmatch(entry):
            raise ConfigError(
                f'server.allowed_hosts: {entry!r} is not a host name, host:port or "*"'
            )


MAKE_TOKEN = 'make one with: python -c "import secrets; print(secrets.token_urlsafe(24))"'
# A DNS name or IPv4 address, or an IPv6 address in brackets; then an optional port.
_HOST_ENTRY = re.compile(r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
MIN_TOKEN_CHARS = 16
MIN_TOKEN_DISTINCT = 8


def _validate_token(token: str) -> None:
    """A token anyone could guess (short, blank, one character repeated) is refused.

    Length and variety are what can be checked without knowing how the token was
    made; ``secrets.token_urlsafe(24)`` gives 32 characters, 192 random bits.
    """
    if any(char.isspace() for char in token):
        raise ConfigError(f"server.access_token: contains white space; {MAKE_TOKEN}")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"server.access_token: {len(token)} characters, at least {MIN_TOKEN_CHARS} "
            f"needed; {MAKE_TOKEN}"
        )
    if len(set(token)) < MIN_TOKEN_DISTINCT:
        raise ConfigError(
            f"server.access_token: only {len(set(token))} different characters, at least "
            f"{MIN_TOKEN_DISTINCT} needed; {MAKE_TOKEN}"
        )


_WEBHOOK_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_LINK_CHANNELS = ("telegram", "webchat")

LinkedIdentity = tuple[str, str]


def parse_link_people(entries: tuple[str, ...]) -> tuple[tuple[LinkedIdentity, ...], ...]:
    """``links.people`` as groups of (channel, external id); raises ``ConfigError``."""
    groups: list[tuple[LinkedIdentity, ...]] = []
    seen: set[LinkedIdentity] = set()
    for entry in entries:
        group: list[LinkedIdentity] = []
        for part in entry.split():
            channel, sep, external_id = part.partition(":")
            if not sep or not external_id or channel not in _LINK_CHANNELS:
                raise ConfigError(
                    f"links.people: {part!r} in {entry!r} is not channel:id "
                    f"(channel one of {', '.join(_LINK_CHANNELS)})"
                )
            if channel == "telegram" and not external_id.isdigit():
                raise ConfigError(f"links.people: {part!r}: a Telegram user id is a number")
            if (channel, external_id) in seen:
                raise ConfigError(f"links.people: {part!r} appears more than once")
            seen.add((channel, external_id))
            group.append((channel, external_id))
        if len(group) < 2:
            raise ConfigError(f"links.people: {entry!r} names fewer than two identities")
        groups.append(tuple(group))
    return tuple(groups)


def _validate_telegram_and_links(config: Config) -> None:
    telegram, links = config.telegram, config.links
    for key, url in (("base_url", telegram.base_url), ("base_file_url", telegram.base_file_url)):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"telegram.{key}: {url!r} is not an http(s) URL")
    if not telegram.webhook_path.startswith("/"):
        raise ConfigError(f"telegram.webhook_path: {telegram.webhook_path!r} must start with /")
    parse_link_people(links.people)
    if not telegram.enabled:
        return
    if not config.telegram_bot_token:
        raise ConfigError(f"telegram.enabled: the bot token must be set in ${telegram.token_env}")
    if telegram.mode == "webhook":
        if not telegram.webhook_url.startswith("https://"):
            raise ConfigError("telegram.webhook_url: webhook mode needs the public https:// URL")
        if not _WEBHOOK_SECRET.match(config.telegram_webhook_secret):
            raise ConfigError(
                f"telegram.mode: webhook mode needs a secret of 1-256 letters, digits, _ or - "
                f"in ${telegram.webhook_secret_env}"
            )
