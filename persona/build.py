"""The persona loop built from config: its judge, observer and reflector chosen, its
parts made once for the composition root (and the commands that run without it).
"""

from __future__ import annotations

import asyncio
import logging

from gateway.brains.base import Brain
from gateway.budget import BudgetState
from gateway.config import Config
from gateway.store import Store
from gateway.supervisor import TaskSupervisor
from gateway.zones import PersonZones
from persona.anchor import (
    PlannerSettings,
)
from persona.budgeted import BudgetedJudge, BudgetedObserver, BudgetedReflector
from persona.judge import (
    Judge,
    QueuedEmbedder,
    SyncPolicy,
    SyncScorer,
    TextEmbedder,
)
from persona.judge_llm import LLMJudge
from persona.judge_local import LocalJudge
from persona.loop import PersonaLoop
from persona.observation.guards import instruction_lines
from persona.observation.llm import LLMObserver, LLMReflector
from persona.observation.log import ObservationLog
from persona.observation.rules import RuleObserver, RuleReflector
from persona.observation.run import ObservePass
from persona.observation.types import ObservationSink, Observer, Reflector
from persona.state import MergePolicy, PersonaBook, initial_state, load_exemplars

# The loop's one logger name, as before the split (log configs name it).
log = logging.getLogger("persona.stages")


MODEL_BRAINS = ("claude", "openai")


def choose_judge(
    config: Config,
    brain: Brain,
    embedder: TextEmbedder | None,
    policy: SyncPolicy,
    queued: QueuedEmbedder | None = None,
) -> Judge:
    kind = config.persona.judge
    if kind == "auto":
        kind = "llm" if brain.name in MODEL_BRAINS else "local"
    if kind == "llm":
        return LLMJudge(
            brain,
            policy,
            max_tokens=config.persona.judge_max_tokens,
            input_usd_per_mtok=config.persona.utility_input_usd_per_mtok,
            output_usd_per_mtok=config.persona.utility_output_usd_per_mtok,
        )
    return local_judge(config, embedder, queued)


def local_judge(
    config: Config, embedder: TextEmbedder | None, queued: QueuedEmbedder | None = None
) -> LocalJudge:
    """The no-model judge; it embeds the reply as the memory stores it ("Ada: …"), so
    with the memory's queue the vector of the turn's ingest is used again."""
    return LocalJudge(
        embedder,
        load_exemplars(config.persona.exemplars_file),
        queued,
        speaker=config.agent.name,
    )


def choose_observer(
    config: Config, brain: Brain, instructions: frozenset[str]
) -> tuple[Observer, Reflector]:

    kind = config.observe.observer
    if kind == "auto":
        kind = "llm" if brain.name in MODEL_BRAINS else "rules"
    if kind == "llm":
        return (
            LLMObserver(
                brain,
                instructions,
                max_tokens=config.observe.max_tokens,
                chunk_tokens=config.observe.observer_chunk_tokens,
            ),
            LLMReflector(brain, max_tokens=config.observe.max_tokens),
        )
    return RuleObserver(instructions), RuleReflector()


def build_persona_loop(
    config: Config,
    store: Store,
    brain: Brain,
    supervisor: TaskSupervisor,
    *,
    persona_text: str,
    embedder: TextEmbedder | None = None,
    embed_queue: QueuedEmbedder | None = None,
    sink: ObservationSink | None = None,
    judge: Judge | None = None,
    zones: PersonZones | None = None,
    budget: BudgetState | None = None,
) -> PersonaLoop:
    """Everything of the persona loop; ``judge`` replaces the configured one (tests, benches)."""
    persona = config.persona
    policy = MergePolicy(
        alpha=persona.trait_alpha,
        decay=persona.marker_decay,
        min_weight=persona.marker_min_weight,
        top_k=persona.marker_top_k,
    )
    exemplars = load_exemplars(persona.exemplars_file)
    book = PersonaBook(store, initial_state(exemplars, policy))
    zones = zones if zones is not None else PersonZones(store, config.zone)
    log_ = ObservationLog(store, sink, zones=zones)
    sync_policy = SyncPolicy.from_config(persona)
    the_judge = (
        judge
        if judge is not None
        else choose_judge(config, brain, embedder, sync_policy, embed_queue)
    )
    if budget is not None and budget.monthly_usd > 0:
        # A tight month: the no-model judge (persona/budgeted.py).
        the_judge = BudgetedJudge(
            the_judge,
            local_judge(config, embedder, embed_queue),
            budget,
        )
    planner = PlannerSettings.from_config(persona)
    seed_contract = book.seed.render_contract()
    fixed_instructions = instruction_lines(persona_text, seed_contract)

    def instructions() -> frozenset[str]:
        return fixed_instructions

    observer, reflector = choose_observer(config, brain, fixed_instructions)
    if budget is not None and budget.monthly_usd > 0:
        observer = BudgetedObserver(observer, RuleObserver(fixed_instructions), budget)
        reflector = BudgetedReflector(reflector, RuleReflector(), budget)
    observe_pass = ObservePass(
        store,
        log_,
        observer,
        reflector,
        book,
        config.observe,
        policy,
        agent_name=config.agent.name,
        instructions=instructions,
        usd_per_mtok=(persona.utility_input_usd_per_mtok, persona.utility_output_usd_per_mtok),
        zones=zones,
    )
    return PersonaLoop(
        store=store,
        supervisor=supervisor,
        book=book,
        log=log_,
        scorer=SyncScorer(store, the_judge, sync_policy),
        observe_pass=observe_pass,
        planner=planner,
        agent_name=config.agent.name,
        observations_tokens=config.observe.block_tokens,
        observe_enabled=config.observe.enabled,
    )


async def local_embedder(config: Config) -> TextEmbedder | None:
    """The memory layer's sentence embedder, loaded for commands that run without the app.

    None when ``memory.embedder`` is "none" or the model cannot load: the local
    judge then scores voice from measurable features alone (and says so).
    The running gateway passes the memory service's own embedder instead.
    """
    from memory.embed import SentenceEmbedder
    from memory.errors import EmbeddingUnavailable

    if config.memory.embedder != "minilm":
        return None
    try:
        return await asyncio.to_thread(
            SentenceEmbedder.load,
            config.memory.embedding_model,
            device=config.memory.embedding_device,
            batch_size=config.memory.embedding_batch,
        )
    except EmbeddingUnavailable as exc:
        log.warning("judge: %s; voice is scored from features only", exc)
        return None
