"""The memory layer in the turn: the pack before the reply, ingest and reinforcement after.

``MemoryPackStage`` runs after the history stage and packs none of the
messages the history budget kept (``PromptDraft.window_ids``); it says which
messages the pack holds (``PromptDraft.packed_message_ids``), so no later stage
puts one of them back into the history. It honours "remember …" / "forget …" first (so the reply can
confirm what really happened: the GUIDANCE block tells the model, and a note
inside the pack says it even to the offline brain), then adds the Memory Pack
and stores its trace under the turn id. ``MemoryIngestStage`` stores the
person's message and the reply as episodes and reinforces what the pack held.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from gateway.brains.base import BlockKind, Recollection
from gateway.budget import BudgetMode, BudgetState
from gateway.clock import local
from gateway.events import PackSize
from gateway.prompt import PromptDraft, TurnContext, TurnOutcome
from memory import repo
from memory.commands import CommandKind, MemoryCommand, asks_about_person, parse_command
from memory.pack import asks
from memory.sanitize import sanitize
from memory.service import Episode, Forgotten, MemoryService, PackRequest, Remembered
from memory.slots import PERSON_SPEAKER
from memory.types import ItemStatus, ItemType

log = logging.getLogger(__name__)

# The speaker an observation quoting a message starts with ("The person: ", "Sam: ").
_QUOTED = re.compile(r"^[A-Z][\w .'-]{0,40}:\s+")


def _quote(text: str, limit: int = 200) -> str:
    # The person's words, quoted into the guidance block: filtered as stored text is.
    text = " ".join(sanitize(text).text.split())
    return f"“{text if len(text) <= limit else text[: limit - 1] + '…'}”"


def remember_texts(done: Remembered) -> tuple[str, str]:
    """(note inside the pack, guidance for the model) after a "remember" request."""
    replaced = ""
    if done.superseded:
        replaced = (
            " It replaces the older " + ", ".join(_quote(t, 80) for _, t in done.superseded) + "."
        )
    note = (
        f"Stored just now at the person's request ({done.type.value} #{done.item_id}): "
        f"{_quote(done.text)}.{replaced}"
    )
    guidance = (
        f"The person asked you to remember {_quote(done.text)}. It is now stored in your memory "
        f"as a {done.type.value}.{replaced} Confirm briefly that you will remember it."
    )
    return note, guidance


def remember_said(done: Remembered) -> str:
    """What the person is told after a "remember" request when no model words it."""
    replaced = ""
    if done.superseded:
        replaced = " It replaces " + ", ".join(_quote(t, 80) for _, t in done.superseded) + "."
    return f"I'll remember {_quote(done.text)} (stored as a {done.type.value}).{replaced}"


def forget_said(done: Forgotten) -> str:
    """What the person is told after a "forget" request when no model words it."""
    if not done.items:
        return f"Nothing I remember matched {_quote(done.query)}, so nothing was forgotten."
    count = len(done.items)
    noun = "memory" if count == 1 else "memories"
    return f"Forgotten: {count} {noun} about {_quote(done.query)} will not be recalled again."


def forget_texts(done: Forgotten) -> tuple[str, str]:
    """(note inside the pack, guidance for the model) after a "forget" request."""
    if not done.items:
        note = f"Asked to forget {_quote(done.query)}, but no stored memory matched it."
        guidance = (
            f"The person asked you to forget {_quote(done.query)}. No stored memory matched it, "
            "so nothing was removed: say so honestly and ask what exactly to forget."
        )
        return note, guidance
    count = len(done.items)
    noun = "memory" if count == 1 else "memories"
    note = (
        f"Forgotten at the person's request: {_quote(done.query)} "
        f"({count} {noun} removed from recall)."
    )
    guidance = (
        f"The person asked you to forget {_quote(done.query)}. {count} stored {noun} about it "
        "were removed from recall. Confirm that it is forgotten and do not bring it up again."
    )
    return note, guidance


@dataclass
class MemoryPackStage:
    """Remember/forget requests, then the Memory Pack for this message."""

    service: MemoryService
    # The budget of the verbatim recent history next to the pack (its messages are not packed).
    history_tokens: int
    agent_name: str = "Ada"
    # At most this many memories answer "what do you remember about me?".
    about_person_items: int = 15
    # Awaited with (person, conversation, message) before each pack: the session
    # flush (gateway/sessions.py) extracts a new session's backlog there first.
    before_pack: Callable[[int, int, int], Awaitable[None]] | None = None
    # The monthly budget's mode (gateway/budget.py): read at each turn; None: no budget.
    budget: BudgetState | None = None
    _names: dict[int, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "memory"

    async def speaker(self, person_id: int) -> str:
        if person_id not in self._names:
            self._names[person_id] = (
                await repo.person_name(self.service.store, person_id) or PERSON_SPEAKER
            )
        return self._names[person_id]

    async def apply(self, turn: TurnContext, draft: PromptDraft) -> None:
        if self.before_pack is not None:
            await self.before_pack(turn.person_id, turn.conversation_id, turn.message_id)
        notes: list[str] = []
        said: list[str] = []
        command = parse_command(turn.text)
        if command is not None:
            note, guidance, told = await self._honour(turn, command)
            notes.append(note)
            said.append(told)
            draft.add(BlockKind.GUIDANCE, guidance)
        mode = self.mode(turn)
        budget_tokens = self.service.settings.budget_tokens
        if self.budget is not None:
            budget_tokens = self.budget.pack_tokens(mode, budget_tokens)
        pack = await self.service.build_pack(
            PackRequest(
                person_id=turn.person_id,
                text=turn.text,
                at=turn.received_at,
                turn_id=turn.turn_id,
                exclude_message_ids=draft.window_ids | {turn.message_id},
                notes=tuple(notes),
                budget_tokens=budget_tokens,
                dense=BudgetState.dense(mode),
                budget_mode=mode.value,
            )
        )
        draft.add(BlockKind.MEMORY, pack.text)
        draft.packed_message_ids = pack.result.kept_message_ids
        draft.pack = PackSize(pack.tokens, len(pack.kept))
        draft.recall = replace(
            draft.recall,
            notes=tuple(said),
            items=pack.result.recollections,
            about_person=await self.held(turn) if asks_about_person(turn.text) else None,
        )

    def mode(self, turn: TurnContext) -> BudgetMode:
        # The budget's own clock (the month it counts in), not the message's time.
        return BudgetMode.NORMAL if self.budget is None else self.budget.current()

    async def held(self, turn: TurnContext) -> tuple[Recollection, ...]:
        """What memory holds for the person, newest first, this conversation included
        (the pack leaves out the recent history a model reads verbatim; this answer
        is the memory itself). Their requests and questions are not things they told."""
        zone = await self.service.zones.of(turn.person_id)
        # Read more than listed: requests, questions and repeats are dropped below.
        rows = await repo.held_for_person(
            self.service.store, turn.person_id, self.about_person_items * 3
        )
        seen: set[str] = set()
        held: list[Recollection] = []
        for row in rows:
            # The rule observer quotes a message as "The person: …": the same statement.
            said = row.content if row.type is ItemType.EPISODE else _QUOTED.sub("", row.content)
            if parse_command(said) is not None or asks(said):
                continue
            key = " ".join(said.lower().split())
            if key in seen:
                continue
            seen.add(key)
            clean = sanitize(said)
            held.append(
                Recollection(
                    local(row.occurred_at, zone).date(), row.role, row.type.value, clean.text
                )
            )
            if len(held) == self.about_person_items:
                break
        return tuple(held)

    async def _honour(self, turn: TurnContext, command: MemoryCommand) -> tuple[str, str, str]:
        """(note inside the pack, guidance for the model, what the person is told)."""
        if command.kind is CommandKind.REMEMBER:
            done = await self.service.remember(
                turn.person_id,
                command.text,
                at=turn.received_at,
                speaker=await self.speaker(turn.person_id),
                message_id=turn.message_id,
                conversation_id=turn.conversation_id,
                channel=turn.channel,
            )
            return (*remember_texts(done), remember_said(done))
        forgotten = await self.service.forget(turn.person_id, command.text, at=turn.received_at)
        return (*forget_texts(forgotten), forget_said(forgotten))


@dataclass
class MemoryIngestStage:
    """After the turn: both messages become episodes; the pack's items are reinforced."""

    service: MemoryService
    pack_stage: MemoryPackStage

    @property
    def name(self) -> str:
        return "memory-ingest"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        command = parse_command(turn.text)
        # A "forget X" request and its answer are kept, but never recalled: they would bring X back.
        status = (
            ItemStatus.FORGOTTEN
            if command is not None and command.kind is CommandKind.FORGET
            else ItemStatus.ACTIVE
        )
        episodes = [
            Episode(
                person_id=turn.person_id,
                text=turn.text,
                at=turn.received_at,
                role="user",
                speaker=await self.pack_stage.speaker(turn.person_id),
                conversation_id=turn.conversation_id,
                message_id=turn.message_id,
                channel=turn.channel,
                source_ref=f"m{turn.message_id}",
                status=status,
            )
        ]
        # The offline brain's notice quotes the pack: stored as the agent's words, it
        # would come back in every later pack and count as the pack's items used.
        reply = outcome.reply_text if outcome.written_by_model else None
        if outcome.reply_id is not None and reply:
            episodes.append(
                Episode(
                    person_id=turn.person_id,
                    text=reply,
                    at=outcome.reply_at or turn.received_at,
                    role="assistant",
                    speaker=self.pack_stage.agent_name,
                    conversation_id=turn.conversation_id,
                    message_id=outcome.reply_id,
                    channel=turn.channel,
                    source_ref=f"m{outcome.reply_id}",
                    status=status,
                )
            )
        known = await repo.existing_refs(
            self.service.store, turn.person_id, [e.source_ref for e in episodes]
        )
        await self.service.ingest([e for e in episodes if e.source_ref not in known])
        if outcome.reply_text:
            # The person's words still refer to items; the notice used none of them.
            # A tight budget makes a packed but ignored memory lose strength: it cost
            # tokens and gave nothing, so it should make the cut less often.
            budget = self.pack_stage.budget
            tight = budget is not None and self.pack_stage.mode(turn) is not BudgetMode.NORMAL
            result = await self.service.reinforce(
                turn.turn_id,
                turn.person_id,
                turn.text,
                reply or "",
                outcome.reply_at or turn.received_at,
                fizzle=-budget.tight_fizzle if budget is not None and tight else None,
            )
            log.debug(
                "turn %d: memory used %s, referred %s, unused %d",
                turn.turn_id,
                result.used,
                result.referred,
                len(result.unused),
            )
