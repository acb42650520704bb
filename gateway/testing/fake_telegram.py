"""A fake Telegram Bot API on loopback that the real python-telegram-bot talks to.

    async with FakeTelegram() as fake:
        # Application.builder().token(fake.token)
        #     .base_url(fake.base_url).base_file_url(fake.base_file_url)
        fake.push(fake.text_update(42, "hello"))
        await fake.wait_for(lambda: fake.sent_texts(42))

It serves ``POST /bot<token>/<method>`` (form, multipart or JSON encoded)
for getMe, deleteWebhook, setWebhook, getWebhookInfo, getUpdates (a queue of
pushed updates, long-polled for at most ``max_poll_s``), sendMessage,
sendChatAction, sendVoice (the uploaded bytes are kept), getFile, and
``GET /file/bot<token>/<path>`` for the files added with ``add_file``. It
records every call, and can answer with flood control (429 with
``parameters.retry_after``), chosen errors, or a whole outage (every call 500).
``push_raw`` queues anything at all as a getUpdates item (a string, ``null``,
an update with a broken field), as a broken upstream might.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.web_request import FileField

from gateway.testing.loopback import LoopbackServer

# Parameters that are text as sent; every other form value is JSON-encoded by PTB.
_TEXT_PARAMS = frozenset(
    {"text", "caption", "secret_token", "url", "action", "file_id", "parse_mode", "emoji"}
)


@dataclass(frozen=True)
class Call:
    """One request the fake received, and the HTTP status it answered."""

    method: str
    params: dict[str, Any]
    files: dict[str, bytes]
    at: float
    status: int


@dataclass
class _Failure:
    status: int
    retry_after: int | None = None


@dataclass
class _Files:
    by_id: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    by_path: dict[str, bytes] = field(default_factory=dict)


class FakeTelegram(LoopbackServer):
    BOT_ID = 999_000_001
    BOT_USERNAME = "fake_agentgw_bot"

    kind = "Telegram"
    client_max_size = 64 << 20

    def __init__(self, token: str = "123456:TEST-fake-token", *, max_poll_s: float = 0.5) -> None:
        super().__init__()
        self.token = token
        self.max_poll_s = max_poll_s
        self.calls: list[Call] = []
        # Every Bot API call answers 500 while this is set.
        self.outage = False
        self.webhook: dict[str, Any] = {}
        # (update id, the item served): an id confirms the item when the
        # offset passes it, even for an item that does not show its id.
        self._updates: list[tuple[int, Any]] = []
        self._new_update = asyncio.Event()
        self._failures: dict[str, list[_Failure]] = {}
        self._files = _Files()
        self._ids = itertools.count(1)

    # -- lifecycle ---------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)

    async def close(self) -> None:
        self._new_update.set()  # release long polls
        await super().close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file/bot"

    # -- what tests push ---------------------------------------------------

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates."""
        self._updates.append((int(update["update_id"]), update))
        self._new_update.set()
        return update

    def push_raw(self, item: Any) -> int:
        """Queue ``item`` as it is for getUpdates, under a new update id (returned)."""
        update_id = next(self._ids)
        self._updates.append((update_id, item))
        self._new_update.set()
        return update_id

    def text_update(
        self,
        user_id: int,
        text: str,
        *,
        first_name: str = "Alice",
        chat_type: str = "private",
        chat_id: int | None = None,
    ) -> dict[str, Any]:
        """An update with a text message (a /command gets its bot_command entity)."""
        message = self._message(user_id, first_name, chat_type, chat_id)
        message["text"] = text
        if text.startswith("/"):
            length = len(text.split(maxsplit=1)[0])
            message["entities"] = [{"type": "bot_command", "offset": 0, "length": length}]
        return {"update_id": next(self._ids), "message": message}

    def voice_update(
        self, user_id: int, audio: bytes, *, duration: int = 3, first_name: str = "Alice"
    ) -> dict[str, Any]:
        """An update with a voice note whose bytes getFile + download will serve."""
        file_id = self.add_file(audio, folder="voice", suffix=".oga")
        message = self._message(user_id, first_name, "private", None)
        message["voice"] = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "duration": duration,
            "mime_type": "audio/ogg",
            "file_size": len(audio),
        }
        return {"update_id": next(self._ids), "message": message}

    def add_file(self, data: bytes, *, folder: str = "documents", suffix: str = "") -> str:
        """Store bytes to be fetched through getFile; returns the file_id."""
        number = next(self._ids)
        file_id = f"file-{number}"
        path = f"{folder}/file_{number}{suffix}"
        self._files.by_id[file_id] = (path, data)
        self._files.by_path[path] = data
        return file_id

    def fail(self, method: str, status: int = 500, *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with ``status``."""
        self._failures.setdefault(method, []).extend(_Failure(status) for _ in range(times))

    def retry_after(self, method: str, seconds: int, *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with flood control."""
        self._failures.setdefault(method, []).extend(_Failure(429, seconds) for _ in range(times))

    # -- what tests read ---------------------------------------------------

    def calls_to(self, method: str, *, ok_only: bool = False) -> list[Call]:
        return [c for c in self.calls if c.method == method and (c.status == 200 or not ok_only)]

    def sent_texts(self, chat_id: int) -> list[str]:
        """Texts of the messages the bot sent to ``chat_id`` successfully, in order."""
        return [
            str(c.params["text"])
            for c in self.calls_to("sendMessage", ok_only=True)
            if c.params.get("chat_id") == chat_id
        ]

    async def wait_for(
        self, predicate: Callable[[], object], timeout: float = 10.0, what: str = ""
    ) -> None:
        """Wait until ``predicate()`` is true; TimeoutError says what was awaited."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                methods = [c.method for c in self.calls[-20:]]
                raise TimeoutError(f"waited {timeout} s for {what or predicate}; calls: {methods}")
            await asyncio.sleep(0.02)

    # -- the server --------------------------------------------------------

    def _message(
        self, user_id: int, first_name: str, chat_type: str, chat_id: int | None
    ) -> dict[str, Any]:
        chat: dict[str, Any] = {"id": chat_id if chat_id is not None else user_id}
        chat["type"] = chat_type
        if chat_type == "private":
            chat["first_name"] = first_name
        else:
            chat["title"] = "A group"
        return {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": chat,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name},
        }

    def _bot_message(self, chat_id: Any) -> dict[str, Any]:
        return {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "from": {
                "id": self.BOT_ID,
                "is_bot": True,
                "first_name": "Fake",
                "username": self.BOT_USERNAME,
            },
        }

    async def _params(self, request: web.Request) -> tuple[dict[str, Any], dict[str, bytes]]:
        params: dict[str, Any] = {}
        files: dict[str, bytes] = {}
        if request.content_type == "application/json":
            body = await request.json()
            return (dict(body) if isinstance(body, dict) else {}), files
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, FileField):
                files[key] = value.file.read()
            elif key in _TEXT_PARAMS:
                params[key] = value
            else:
                try:
                    params[key] = json.loads(value)
                except ValueError:
                    params[key] = value
        return params, files

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params, files = await self._params(request)
        status, body = await self._answer(request.match_info["token"], method, params, files)
        self.calls.append(Call(method, params, files, time.monotonic(), status))
        return web.json_response(body, status=status)

    async def _answer(
        self, token: str, method: str, params: dict[str, Any], files: dict[str, bytes]
    ) -> tuple[int, dict[str, Any]]:
        if token != self.token:
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        if self.outage:
            return 500, {"ok": False, "error_code": 500, "description": "Internal Server Error"}
        pending = self._failures.get(method)
        if pending:
            failure = pending.pop(0)
            body: dict[str, Any] = {"ok": False, "error_code": failure.status}
            if failure.retry_after is not None:
                body["description"] = f"Too Many Requests: retry after {failure.retry_after}"
                body["parameters"] = {"retry_after": failure.retry_after}
            else:
                body["description"] = "Injected failure"
            return failure.status, body
        result = await self._result(method, params, files)
        if result is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found"}
        return 200, {"ok": True, "result": result}

    async def _result(self, method: str, params: dict[str, Any], files: dict[str, bytes]) -> Any:
        if method == "getMe":
            return {
                "id": self.BOT_ID,
                "is_bot": True,
                "first_name": "Fake",
                "username": self.BOT_USERNAME,
                "can_join_groups": False,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        if method == "deleteWebhook":
            self.webhook = {}
            return True
        if method == "setWebhook":
            self.webhook = dict(params)
            return True
        if method == "getWebhookInfo":
            return {
                "url": self.webhook.get("url", ""),
                "has_custom_certificate": False,
                "pending_update_count": len(self._updates),
            }
        if method == "getUpdates":
            return await self._get_updates(params)
        if method == "sendChatAction":
            return True
        if method == "sendMessage":
            return {**self._bot_message(params.get("chat_id")), "text": params.get("text", "")}
        if method == "sendVoice":
            number = next(self._ids)
            return {
                **self._bot_message(params.get("chat_id")),
                "voice": {
                    "file_id": f"sent-voice-{number}",
                    "file_unique_id": f"usent{number}",
                    "duration": params.get("duration", 1),
                    "mime_type": "audio/ogg",
                    "file_size": len(files.get("voice", b"")),
                },
            }
        if method == "getFile":
            found = self._files.by_id.get(str(params.get("file_id")))
            if found is None:
                return None
            path, data = found
            return {
                "file_id": params["file_id"],
                "file_unique_id": f"u{params['file_id']}",
                "file_size": len(data),
                "file_path": path,
            }
        return None

    async def _get_updates(self, params: dict[str, Any]) -> list[Any]:
        offset = int(params.get("offset") or 0)
        limit = int(params.get("limit") or 100)
        wait = min(float(params.get("timeout") or 0), self.max_poll_s)
        # An offset confirms every update before it, as on Telegram.
        self._updates = [(n, item) for n, item in self._updates if n >= offset]
        if not self._updates and wait > 0:
            self._new_update.clear()
            try:
                await asyncio.wait_for(self._new_update.wait(), wait)
            except TimeoutError:
                return []
        return [item for _, item in self._updates[:limit]]

    async def _file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            raise web.HTTPUnauthorized()
        data = self._files.by_path.get(request.match_info["path"])
        if data is None:
            raise web.HTTPNotFound()
        self.calls.append(Call("download", {"path": request.match_info["path"]}, {}, 0.0, 200))
        return web.Response(body=data, content_type="application/octet-stream")
