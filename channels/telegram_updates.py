"""Reading Telegram updates without letting one bad update stop the channel.

python-telegram-bot parses a whole ``getUpdates`` answer at once
(``Update.de_list``). One item it cannot parse — a ``"date": "yesterday"``,
a ``null`` or a string where an update belongs — fails the whole batch, and
because that failure is not a ``TelegramError`` its polling loop logs a
CRITICAL traceback and asks again at once with the same offset: hundreds of
calls a second, the log growing by megabytes, and the good updates of the
batch never answered.

``UpdatesRequest`` is the transport of ``getUpdates`` only (PTB's
``get_updates_request``). It screens each answer before PTB sees it, with
the same parser PTB will use (``read_update``):

- an update that cannot be read but carries its ``update_id`` is replaced by
  ``{"update_id": n}`` — an empty update the channel ignores — so PTB's
  offset moves past it and Telegram forgets it;
- an item with no usable id (not an object, no integer ``update_id``) is
  dropped; a later update of the batch confirms it. When nothing in the
  answer can be read or confirmed, or the answer is not JSON, or nests too
  deeply, the call fails with a ``TelegramError``, so PTB's loop backs off
  (1 s growing to 30 s) instead of spinning.

Each skipped item is logged once (a WARNING naming what was wrong), not on
every poll that sees it again.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from http import HTTPStatus
from typing import Any

from telegram import Bot, Update
from telegram.error import TelegramError
from telegram.request import HTTPXRequest, RequestData

from gateway.errors import InputError, MalformedFrame
from gateway.untrusted import MAX_ID, loads

log = logging.getLogger(__name__)

# Skipped items remembered so a repeat is not logged again; bounded.
_LOGGED_KEEP = 256


class UnreadableUpdate(InputError):
    code = "unreadable_update"


def update_id_of(data: object) -> int | None:
    """The ``update_id`` of ``data`` when it is an object with a usable one."""
    if not isinstance(data, dict):
        return None
    value = data.get("update_id")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ID:
        return value
    return None


def read_update(data: object, bot: Bot | None = None) -> Update:
    """The ``Update`` in ``data``; ``UnreadableUpdate`` says why there is none."""
    if not isinstance(data, dict):
        raise UnreadableUpdate(f"an update must be a JSON object, not {type(data).__name__}")
    if update_id_of(data) is None:
        raise UnreadableUpdate(f"update_id must be an integer from 0 to {MAX_ID}")
    try:
        return Update.de_json(data, bot)
    except Exception as exc:  # whatever PTB's parsers raise on data they cannot read
        raise UnreadableUpdate(f"python-telegram-bot cannot read it ({exc!r:.200})") from exc


class UpdatesRequest(HTTPXRequest):
    """HTTPX transport for ``getUpdates`` that screens each answer (see the module)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._logged: OrderedDict[str, None] = OrderedDict()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = HTTPXRequest.DEFAULT_NONE,
        write_timeout: Any = HTTPXRequest.DEFAULT_NONE,
        connect_timeout: Any = HTTPXRequest.DEFAULT_NONE,
        pool_timeout: Any = HTTPXRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        code, payload = await super().do_request(
            url,
            method,
            request_data,
            read_timeout=read_timeout,
            write_timeout=write_timeout,
            connect_timeout=connect_timeout,
            pool_timeout=pool_timeout,
        )
        if not HTTPStatus.OK <= code < HTTPStatus.MULTIPLE_CHOICES:
            return code, payload  # PTB maps error statuses to TelegramErrors itself
        return code, self.screen(payload)

    def screen(self, payload: bytes) -> bytes:
        """The answer with unreadable updates replaced or dropped; raises
        ``TelegramError`` when nothing in it can be read or confirmed."""
        try:
            body = loads(payload)
        except MalformedFrame as exc:
            raise TelegramError(f"getUpdates answered {exc}") from exc
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list):
            raise TelegramError("getUpdates answered something other than a list of updates")
        kept: list[Any] = []
        last = -1
        changed = False
        for item in result:
            try:
                update_id = read_update(item).update_id
            except UnreadableUpdate as exc:
                changed = True
                known = update_id_of(item)
                self._note(item, known, exc)
                if known is None or known <= last:
                    continue  # no id to confirm it by: a later update confirms it
                # An empty update the channel ignores; PTB's offset moves past it.
                kept.append({"update_id": known})
                update_id = known
            else:
                kept.append(item)
            last = update_id
        if not changed:
            return payload
        if not kept:
            # Asking again at once would get the same answer: fail, so PTB backs off.
            raise TelegramError("getUpdates answered only updates that cannot be read")
        return json.dumps({**body, "result": kept}).encode()

    def _note(self, item: object, update_id: int | None, error: UnreadableUpdate) -> None:
        shown = repr(item)[:200]
        if shown in self._logged:
            self._logged.move_to_end(shown)
            log.debug("telegram: skipped the unreadable update %s again", shown)
            return
        self._logged[shown] = None
        if len(self._logged) > _LOGGED_KEEP:
            self._logged.popitem(last=False)
        log.warning(
            "telegram: skipped an update that cannot be read (update_id %s): %s; it was %s",
            update_id,
            error,
            shown,
        )
