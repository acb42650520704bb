"""Sessions and their flush (issue 21): memory is written when a session ends, and a
new session never starts from a memory that is behind.

A session is a conversation's run of turns: it starts with the first pack after a
quiet spell and ends when its webchat page closes, when it has been idle for
``upkeep_jobs.session_idle_s`` (a Telegram chat has no page to close), or when
the gateway stops (SIGTERM/SIGINT). At its end the person's pending memory work
is written: every extractor (the observer, whose pass otherwise waits for a
token threshold) reads the person's unprocessed turns, the ``on_end`` writers run
for the conversation (the handoff note, issue 24), and the indexes' unsaved
changes go to disk. A stop waits for these flushes at most
``server.shutdown_grace_s``; a crash skips them, and the nightly catch-up or the
next session's start reads what they would have.

Before the first pack of a session, the person's unprocessed turns are
extracted, bounded by ``upkeep_jobs.session_catch_up_s``: then the pack goes
ahead and the extraction goes on in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.prompt import TurnContext, TurnOutcome

log = logging.getLogger(__name__)

# Processes the unprocessed turns of one person (or everyone: None); how many.
Extract = Callable[[int | None], Awaitable[int]]
Save = Callable[[], Awaitable[None]]
# Runs when a session of (person, conversation) ends, after the extractors (the
# handoff note, issue 24).
Ended = Callable[[int, int], Awaitable[object]]
# Whether the person has turns older than this message that are not processed yet.
Behind = Callable[[int, int], Awaitable[bool]]


@dataclass
class _Open:
    person_id: int
    timer: asyncio.TimerHandle | None
    # What the timer waits for ("idle", "page closed") and how long, to re-arm it.
    why: str = "idle"
    after_s: float = 0.0


class Sessions:
    """Open sessions by conversation, their idle timers, and the flushes under way."""

    def __init__(
        self,
        extractors: Sequence[Extract],
        save: Save | None,
        *,
        idle_s: float,
        catch_up_s: float,
        close_s: float = 0.0,
        behind: Behind | None = None,
        on_end: Sequence[Ended] = (),
    ) -> None:
        self.extractors = list(extractors)
        self.save = save
        self.idle_s = idle_s
        self.catch_up_s = catch_up_s
        self.close_s = close_s
        self.behind = behind
        self.on_end = list(on_end)
        self._open: dict[int, _Open] = {}
        # One flush per person at a time; a second request waits for it (and then
        # finds little or nothing left).
        self._flushing: dict[int, asyncio.Task[int]] = {}
        self._tasks: set[asyncio.Task[int]] = set()
        self.flushed = 0  # turns extracted by flushes so far (the panel and tests read it)
        self._closing = False

    @property
    def open_sessions(self) -> int:
        return len(self._open)

    async def before_pack(self, person_id: int, conversation_id: int, message_id: int) -> None:
        """A turn's pack is about to be built: keep its session open; the first of a
        session first extracts the person's backlog (bounded), when there is one
        older than this message (the message itself is the observer's to read in
        its own time, as any other)."""
        new = conversation_id not in self._open
        self._touch(person_id, conversation_id, self.idle_s)
        if not new or not self.extractors:
            return
        if self.behind is not None and not await self.behind(person_id, message_id):
            return
        task = self._flush(person_id, save=False)
        done, _ = await asyncio.wait({task}, timeout=self.catch_up_s)
        if not done:
            log.info(
                "session of person %d: catch-up still running after %.1f s; the pack goes ahead",
                person_id,
                self.catch_up_s,
            )

    def turn_ended(self, person_id: int, conversation_id: int) -> None:
        """A turn's after-turn work is done: the quiet spell counts from here, not from
        its start (a turn longer than the idle time would end its own session half-way,
        and the flush would read its message without the reply)."""
        found = self._open.get(conversation_id)
        if found is not None:
            self._touch(person_id, conversation_id, found.after_s, found.why)
        else:
            # The session ended while the turn ran (a page closed, or a turn longer than
            # the idle time): its reply is new work, so a session opens again for it.
            self._touch(person_id, conversation_id, self.idle_s or self.close_s)

    @property
    def after_stage(self) -> SessionTouch:
        return SessionTouch(self)

    def page_closed(self, conversation_id: int) -> None:
        """A webchat page of the conversation closed: its session ends ``close_s``
        later, unless a turn comes first (a reload or a dropped connection that
        comes back within it is the same session)."""
        found = self._open.get(conversation_id)
        if found is None:
            return
        if self.close_s <= 0:
            self._end(conversation_id, "page closed")
        else:
            self._touch(found.person_id, conversation_id, self.close_s, "page closed")

    def _touch(
        self, person_id: int, conversation_id: int, after_s: float, why: str = "idle"
    ) -> None:
        found = self._open.get(conversation_id)
        if found is not None and found.timer is not None:
            found.timer.cancel()
        timer = None
        if after_s > 0:
            timer = asyncio.get_running_loop().call_later(after_s, self._end, conversation_id, why)
        self._open[conversation_id] = _Open(person_id, timer, why, after_s)

    def _end(self, conversation_id: int, why: str) -> None:
        found = self._open.pop(conversation_id, None)
        if found is None or self._closing:
            return
        if found.timer is not None:
            found.timer.cancel()
        log.debug("session of conversation %d ended (%s): flush", conversation_id, why)
        self._flush(found.person_id, save=True, conversation_id=conversation_id)

    def _flush(
        self, person_id: int, *, save: bool, conversation_id: int | None = None
    ) -> asyncio.Task[int]:
        running = self._flushing.get(person_id)
        if running is not None and not running.done():
            if not save:
                return running
            # A save was asked for after it began: one more flush, after it.
            previous: asyncio.Task[int] | None = running
        else:
            previous = None
        task = asyncio.create_task(
            self._run_flush(previous, person_id, save, conversation_id),
            name=f"session-flush-{person_id}",
        )
        self._flushing[person_id] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run_flush(
        self,
        previous: asyncio.Task[int] | None,
        person_id: int,
        save: bool,
        conversation_id: int | None = None,
    ) -> int:
        if previous is not None:
            await asyncio.wait({previous})
        extracted = 0
        for extract in self.extractors:
            try:
                extracted += await extract(person_id)
            except Exception:
                # The backlog stays in the store: the nightly catch-up reads it.
                log.exception("session flush of person %d: an extractor failed", person_id)
        if conversation_id is not None:
            for ended in self.on_end:
                try:
                    await ended(person_id, conversation_id)
                except Exception:
                    # The messages stay stored: a later session's note covers them.
                    log.exception(
                        "session end of conversation %d: a session-end writer failed",
                        conversation_id,
                    )
        if save and self.save is not None:
            try:
                await self.save()
            except Exception:
                log.exception("session flush of person %d: saving the indexes failed", person_id)
        self.flushed += extracted
        if extracted:
            log.info("session flush: %d turns of person %d extracted", extracted, person_id)
        return extracted

    async def aclose(self, grace_s: float) -> bool:
        """The gateway stops: every open session ends and is flushed, waited for at most
        ``grace_s``; True when all finished (those that did not are cancelled, and the
        next start's catch-up reads what they would have)."""
        for conversation_id in list(self._open):
            self._end(conversation_id, "stop")
        self._closing = True
        pending = set(self._tasks)
        if not pending:
            return True
        _, left = await asyncio.wait(pending, timeout=grace_s)
        for task in left:
            task.cancel()
        for task in left:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if left:
            log.warning("stop: %d session flushes did not finish within %.1f s", len(left), grace_s)
        return not left


@dataclass(frozen=True)
class SessionTouch:
    """The last after-turn stage: the turn is over, its session's quiet spell starts."""

    sessions: Sessions

    @property
    def name(self) -> str:
        return "session"

    async def after_turn(self, turn: TurnContext, outcome: TurnOutcome) -> None:
        self.sessions.turn_ended(turn.person_id, turn.conversation_id)
