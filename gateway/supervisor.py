"""Owns every background task: named, tracked, failures logged, awaited on close."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class TaskSupervisor:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    @property
    def running(self) -> int:
        return len(self._tasks)

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        if self._closed:
            coro.close()
            raise RuntimeError(f"supervisor is closed; refused to start {name}")
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("task %s failed", task.get_name(), exc_info=exc)

    async def wait(self, timeout: float) -> bool:
        """Wait for the running tasks; True when all finished in time."""
        if not self._tasks:
            return True
        _done, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        return not pending

    async def aclose(self, grace_s: float = 0.0) -> None:
        """Stop taking tasks, give running ones ``grace_s``, then cancel and await them."""
        self._closed = True
        if grace_s > 0:
            await self.wait(grace_s)
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
