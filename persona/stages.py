"""The persona loop in the turn pipeline: three context stages, two after-turn stages.

Context (before the prompt is composed, in this order after the core's):

- ``PersonaStateStage`` extends the core's persona contract (``PersonaStage``)
  with the current PersonaState: measured voice and confirmed hard rules;
- ``ObservationsStage`` adds the OBSERVATIONS block (stable between passes);
- ``AnchorStage`` runs after the history stage: it puts back any message the
  observer has not read yet that the history budget dropped, applies the
  conversation's standing rebase, and carries out the planner's action for
  this turn (reinforcement, anchors or a new rebase), storing it with the turn.

After the turn (in the conversation's lane, slow work in supervised tasks):

- ``JudgeStage`` scores the reply (SyncScore) in the background; a severe
  verdict also has the observer read everything still unread, so a rebase on
  the next turn loses nothing;
- ``ObserveStage`` starts an observe pass when the unobserved messages reach
  the threshold (after the judge of the same conversation has finished, so
  the persona track sees the newest verdicts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Container, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from gateway.brains.base import BlockKind, Brain, ChatMessage
from gateway.budget import BudgetState
from gateway.config import Config
from gateway.events import ObserverBacklog
from gateway.prompt import (
    AfterTurnStage,
    ContextStage,
    HistoryEntry,
    PastMessage,
    PromptDraft,
    TurnContext,
    TurnOutcome,
)
from gateway.store import Store
from gateway.store.models import Turn, utcnow
from gateway.supervisor import TaskSupervisor
from gateway.tokens import estimate_tokens
from gateway.zones import PersonZones
from persona.anchor import (
    REINFORCE_PREFIX,
    PlannerSettings,
    build_rebase,
    place_anchors,
    plan,
)
from persona.budgeted import BudgetedJudge, BudgetedObserver, BudgetedReflector
from persona.judge import (
    Judge,
    JudgeInput,
    QueuedEmbedder,
    SyncPolicy,
    SyncScorer,
    TextEmbedder,
    Tier,
)
from persona.judge_llm import LLMJudge
from persona.judge_local import LocalJudge
from persona.models import ActionKind, PersonaAction
from persona.observation.guards import instruction_lines
from persona.observation.lag import observer_backlog
from persona.observation.llm import LLMObserver, LLMReflector
from persona.observation.log import ObservationLog
from persona.observation.rules import RuleObserver, RuleReflector
from persona.observation.run import ObservePass, PassResult
from persona.observation.types import ObservationSink, Observer, Reflector
from persona.state import MergePolicy, PersonaBook, initial_state, load_exemplars
from persona.turnfacts import persona_turn

log = logging.getLogger(__name__)

MODEL_BRAINS = ("claude", "openai")


# -- history helpers -------------------------------------------------------------


def restore_unobserved(
    recent: Sequence[PastMessage],
    history: Sequence[HistoryEntry],
    observed_through: int,
    packed: Container[int] = frozenset(),
) -> tuple[list[HistoryEntry], list[int]]:
    """The history with every unobserved message in it, in order; and the ids put back.

    The history budget may drop old messages, but one the observer has not
    read yet would then be lost to the agent entirely: it stays until observed.
    One the memory pack holds (``packed``) is not lost, and stays out: a
    message is in the pack or in the history, never both.
    """
    present = {e.message_id for e in history if e.message_id is not None}
    missing = [
        m
        for m in recent
        if m.message_id > observed_through
        and m.message_id not in present
        and m.message_id not in packed
    ]
    if not missing:
        return list(history), []
    merged: list[HistoryEntry] = []
    pending = list(missing)
    for entry in history:
        while pending and entry.message_id is not None and pending[0].message_id < entry.message_id:
            past = pending.pop(0)
            merged.append(HistoryEntry(past.role, past.text, past.message_id))
        merged.append(entry)
    merged.extend(HistoryEntry(p.role, p.text, p.message_id) for p in pending)
    # The Messages API wants a user message first: bring the restored reply's question too.
    if merged and merged[0].role == "assistant":
        first_id = merged[0].message_id
        before = [m for m in recent if first_id is not None and m.message_id < first_id]
        question = next((m for m in reversed(before) if m.role == "user"), None)
        if question is not None:
            merged.insert(0, HistoryEntry("user", question.text, question.message_id))
    return merged, [m.message_id for m in missing]


# -- context stages -------------------------------------------------------------


@dataclass(frozen=True)
class PersonaStateStage:
    """The PersonaState after the core's persona contract, in the same cached block."""

    book: PersonaBook

    @property
    def name(self) -> str:
        return "persona_state"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        facts = await persona_turn(self.book, turn, draft)
        draft.add(BlockKind.PERSONA, facts.version.state.render_contract())


@dataclass(frozen=True)
class ObservationsStage:
    log: ObservationLog
    budget_tokens: int

    @property
    def name(self) -> str:
        return "observations"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        draft.add(BlockKind.OBSERVATIONS, await self.log.block(turn.person_id, self.budget_tokens))


@dataclass(frozen=True)
class AnchorStage:
    """Unobserved-message guard, standing rebase, and this turn's anchor action."""

    store: Store
    log: ObservationLog
    book: PersonaBook
    settings: PlannerSettings
    agent_name: str
    # Off when observing is off: then nothing is ever "observed" and the budget rules.
    guard_unobserved: bool = True

    @property
    def name(self) -> str:
        return "anchor"

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        # Version, cursor, standing rebase and drift: read once for the turn's persona stages.
        facts = await persona_turn(self.book, turn, draft)
        through = facts.observed_through
        if self.guard_unobserved:
            entries, restored = restore_unobserved(
                turn.recent, draft.history, through, draft.packed_message_ids
            )
        else:
            through = max((m.message_id for m in turn.recent), default=0)
            entries = list(draft.history)
            restored = []
        standing, last = facts.standing, facts.latest_action
        # The pipeline counts the turn when it starts; a context built by hand may not.
        turn_number = turn.turn_number or await self._turn_number(turn)
        drift = facts.drift
        since = None if standing is None else turn_number - int(standing["turn_number"])
        # The action taken on the turn just before this one, if any.
        previous = last[0] if last is not None and last[1] == turn_number - 1 else None
        decision = plan(
            self.settings,
            turn_number=turn_number,
            drift=drift,
            history_messages=len(entries),
            turns_since_rebase=since,
            previous_action=previous,
        )
        detail: dict[str, Any] = {"reason": decision.reason, "turn_number": turn_number}
        if restored:
            detail["restored_unobserved"] = restored
        state = facts.version.state
        kind = decision.kind
        guidance = ""
        if kind is ActionKind.REBASE:
            rebase = build_rebase(
                turn.recent,
                keep_turns=self.settings.rebase_keep_turns,
                summary_tokens=self.settings.rebase_summary_tokens,
                observed_through=through,
                agent_name=self.agent_name,
            )
            if rebase is None:
                # Too short to rebase: the strongest thing left is anchoring.
                kind = ActionKind.REINFORCE
            else:
                standing = {
                    "summary": rebase.summary,
                    "base_message_id": rebase.base_message_id,
                    "turn_number": turn_number,
                }
                detail.update(
                    standing,
                    summarized_ids=list(rebase.summarized_ids),
                    unobserved_in_summary=list(rebase.unobserved_in_summary),
                )
        if standing is not None:
            base = int(standing["base_message_id"])
            entries = [e for e in entries if e.message_id is None or e.message_id >= base]
            # The summary bridges to the first kept message; once the history has
            # moved past it (budget), the observations carry the past on their own.
            if any(e.message_id == base for e in entries):
                guidance = str(standing["summary"])
        history = entries
        if kind is ActionKind.ANCHOR:
            anchor = state.render_anchor(
                self.settings.anchor_min_tokens, self.settings.anchor_max_tokens, self.agent_name
            )
            placed, positions = place_anchors(
                [ChatMessage(e.role, e.text) for e in history], anchor
            )
            # An anchor rides on a stored message: the entry stays that message.
            history = [
                HistoryEntry(m.role, m.text, e.message_id)
                for m, e in zip(placed, history, strict=True)
            ]
            detail.update(anchor=anchor, positions=positions, history_messages=len(history))
            if not positions:
                kind = ActionKind.REINFORCE
        if kind in (ActionKind.REINFORCE, ActionKind.ANCHOR, ActionKind.REBASE):
            reinforcement = REINFORCE_PREFIX + state.render_reinforcement(
                self.settings.reinforcement_tokens
            )
            guidance = f"{guidance}\n\n{reinforcement}" if guidance else reinforcement
            detail["reinforcement"] = reinforcement
        if guidance:
            draft.add(BlockKind.GUIDANCE, guidance)
        draft.history = history
        if kind is not None:
            await self._record(turn, kind, drift.tier, drift.ewma, detail)

    async def _turn_number(self, turn: TurnContext) -> int:
        async with self.store.reader() as session:
            count = await session.scalar(
                select(func.count())
                .select_from(Turn)
                .where(Turn.conversation_id == turn.conversation_id, Turn.id <= turn.turn_id)
            )
        return int(count or 0)

    async def _record(
        self,
        turn: TurnContext,
        kind: ActionKind,
        tier: Tier,
        ewma: float | None,
        detail: dict[str, Any],
    ) -> None:
        tokens = sum(
            estimate_tokens(str(detail.get(key, "")))
            for key in ("summary", "anchor", "reinforcement")
        )
        if kind is ActionKind.ANCHOR:
            tokens += estimate_tokens(str(detail.get("anchor", ""))) * (
                len(detail.get("positions", [])) - 1
            )
        async with self.store.session() as session:
            session.add(
                PersonaAction(
                    turn_id=turn.turn_id,
                    conversation_id=turn.conversation_id,
                    kind=kind,
                    tier=tier.value,
                    ewma=ewma,
                    tokens=tokens,
                    detail=detail,
                    created_at=utcnow(),
                )
            )


# -- after-turn stages ------------------------------------------------------------


@dataclass
class PersonaLoop:
    """The persona loop's parts, built once by the composition root."""

    store: Store
    supervisor: TaskSupervisor
    book: PersonaBook
    log: ObservationLog
    scorer: SyncScorer
    observe_pass: ObservePass
    planner: PlannerSettings
    agent_name: str
    observations_tokens: int
    observe_enabled: bool = True
    _judging: dict[int, asyncio.Task[Any]] = field(default_factory=dict)
    _observing: set[int] = field(default_factory=set)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[Any]:
        task = self.supervisor.spawn(name, coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def idle(self, timeout: float) -> bool:
        """Wait until no judge or observe task of this loop runs; True when they all ended."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self._tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=left)
        return True

    async def warm(self) -> None:
        """What the judge computes once (the local judge's exemplar vectors), now: in the
        gateway's warm-up, not in the first reply's judgement."""
        judge = self.scorer.judge
        judges = (judge.model, judge.fallback) if isinstance(judge, BudgetedJudge) else (judge,)
        for each in judges:
            if isinstance(each, LocalJudge):
                await each.prepare()

    async def observer_backlog(self, threshold_tokens: int) -> ObserverBacklog:
        """Unread messages by the observer's cursors (for /metrics and /readyz)."""
        return await self.store.read(lambda c: observer_backlog(c, threshold_tokens))

    @property
    def context_stages(self) -> list[ContextStage]:
        return [
            PersonaStateStage(self.book),
            ObservationsStage(self.log, self.observations_tokens),
            AnchorStage(
                self.store,
                self.log,
                self.book,
                self.planner,
                self.agent_name,
                guard_unobserved=self.observe_enabled,
            ),
        ]

    @property
    def after_stages(self) -> list[AfterTurnStage]:
        stages: list[AfterTurnStage] = [JudgeStage(self)]
        if self.observe_enabled:
            stages.append(ObserveStage(self))
        return stages

    async def judge_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        request = outcome.request
        # The offline brain's notice is the gateway's voice, not the agent's: no verdict.
        if request is None or outcome.reply_text is None or not outcome.written_by_model:
            return
        state = (await self.book.latest()).state

        def block(kind: BlockKind) -> str:
            return "\n\n".join(b.text for b in request.system if b.kind is kind)

        item = JudgeInput(
            reply=outcome.reply_text,
            user_message=turn.text,
            pack=block(BlockKind.MEMORY),
            observations=block(BlockKind.OBSERVATIONS),
            history=request.messages[:-1],
            persona=block(BlockKind.PERSONA),
            state=state,
        )
        previous = self._judging.get(turn.conversation_id)
        task = self._spawn(
            f"judge-turn-{turn.turn_id}",
            self._judge(previous, turn, outcome.reply_id, item),
        )
        self._judging[turn.conversation_id] = task
        task.add_done_callback(lambda t: self._forget(turn.conversation_id, t))

    def _forget(self, conversation_id: int, task: asyncio.Task[Any]) -> None:
        if self._judging.get(conversation_id) is task:
            del self._judging[conversation_id]

    async def _judge(
        self,
        previous: asyncio.Task[Any] | None,
        turn: TurnContext,
        reply_id: int | None,
        item: JudgeInput,
    ) -> None:
        # Verdicts of one conversation are stored in turn order: the EWMA is a chain.
        if previous is not None:
            await asyncio.wait({previous})
        verdict = await self.scorer.score(
            turn_id=turn.turn_id,
            conversation_id=turn.conversation_id,
            reply_message_id=reply_id,
            item=item,
        )
        log.debug(
            "turn %d: SyncScore %s ewma=%s tier=%s by %s",
            turn.turn_id,
            verdict.composite,
            verdict.ewma,
            verdict.tier,
            verdict.judge,
        )
        if verdict.tier is Tier.SEVERE and self.observe_enabled:
            await self.observe_pass.run(turn.conversation_id, turn.person_id, force=True)

    async def observe_turn(self, turn: TurnContext) -> None:
        conversation_id = turn.conversation_id
        if conversation_id in self._observing or not await self.observe_pass.due(conversation_id):
            return
        self._observing.add(conversation_id)
        judging = self._judging.get(conversation_id)
        try:
            self._spawn(
                f"observe-conversation-{conversation_id}-turn-{turn.turn_id}",
                self._observe(judging, turn),
            )
        except RuntimeError:
            self._observing.discard(conversation_id)
            raise

    async def observe_now(self, conversation_id: int, person_id: int) -> PassResult | None:
        """A pass over the conversation's unobserved messages now, however few (the
        panel's "observe now"); None when none are left. It runs as this loop's task,
        like every pass: shutdown waits for it, and a page that goes away does not cut
        it short. A reply being judged is judged first (its verdict feeds the pass)."""
        done: list[PassResult | None] = []
        judging = self._judging.get(conversation_id)

        async def run() -> None:
            if judging is not None:
                await asyncio.wait({judging})
            done.append(await self.observe_pass.run(conversation_id, person_id, force=True))

        await asyncio.shield(self._spawn(f"observe-now-conversation-{conversation_id}", run()))
        return done[0] if done else None

    async def _observe(self, judging: asyncio.Task[Any] | None, turn: TurnContext) -> None:
        try:
            if judging is not None:
                await asyncio.wait({judging})
            await self.observe_pass.run(turn.conversation_id, turn.person_id)
        finally:
            self._observing.discard(turn.conversation_id)


@dataclass(frozen=True)
class JudgeStage:
    loop: PersonaLoop

    @property
    def name(self) -> str:
        return "judge"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        await self.loop.judge_turn(turn, outcome)


@dataclass(frozen=True)
class ObserveStage:
    loop: PersonaLoop

    @property
    def name(self) -> str:
        return "observe"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        await self.loop.observe_turn(turn)


# -- building it from config --------------------------------------------------------


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
    return LocalJudge(embedder, load_exemplars(config.persona.exemplars_file), queued)


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
            LocalJudge(embedder, load_exemplars(config.persona.exemplars_file), embed_queue),
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
