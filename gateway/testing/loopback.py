"""The lifecycle every fake server of the tests shares: an aiohttp app on a free
loopback port, started and closed once, usable with ``async with``."""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Self

from aiohttp import web


class LoopbackServer(abc.ABC):
    """An aiohttp app on 127.0.0.1 and a port the OS picks; subclasses add the routes."""

    kind = "fake"
    # Largest request body the fake accepts (uploads of voice notes, long prompts).
    client_max_size = 16 << 20

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.port = 0

    @abc.abstractmethod
    def _add_routes(self, app: web.Application) -> None:
        """Register the fake's handlers."""

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError(f"the {self.kind} server is already running")
        app = web.Application(client_max_size=self.client_max_size)
        self._add_routes(app)
        # Cancel handlers whose client left (a timed-out call), so a delayed
        # answer does not hold up close().
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
        except BaseException:
            await runner.cleanup()
            raise
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"
