"""Reading what clients send, before anything trusts it.

Three rules every inbound path shares:

- ``loads``: JSON with a bounded nesting depth. ``json.loads`` recurses once
  per level, so ten kilobytes of ``[`` end in a ``RecursionError``; the depth
  is checked first, without recursing, and costs nothing on flat frames.
- ``store_id``: an id a client names must fit the store's 64-bit integers
  (SQLite's INTEGER, PostgreSQL's BIGINT); a bigger one raises
  ``OverflowError`` inside the driver.
- ``storable``: text the store can hold. Valid JSON can carry a lone UTF-16
  surrogate (``"\\ud800"``), which no UTF-8 encoder accepts, and NUL, which
  PostgreSQL refuses; both become U+FFFD instead of failing the message.
"""

from __future__ import annotations

import json
import re
from _json import scanstring  # json.decoder's own C string scanner, as typeshed knows it
from typing import Any

import numpy as np

from gateway.errors import MalformedFrame

# Our frames are flat objects; 32 levels leaves room for any sane extension.
MAX_JSON_DEPTH = 32
# The largest id SQLite's INTEGER and PostgreSQL's BIGINT hold.
MAX_ID = (1 << 63) - 1

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Bytes that are not brackets, deleted in one C call; +1 for an opener, -1 for a closer.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = np.zeros(256, dtype=np.int32)
_STEPS[list(b"[{")] = 1
_STEPS[list(b"]}")] = -1


def nesting_exceeds(text: str, limit: int) -> bool:
    """Whether the JSON in ``text`` nests deeper than ``limit`` (brackets in strings
    do not count). Linear, and nothing per bracket runs in Python."""
    if text.count("[") + text.count("{") <= limit:
        return False  # it cannot nest deeper than it has openers: the common case
    outside: list[str] = []
    pos = 0
    while (quote := text.find('"', pos)) >= 0:
        outside.append(text[pos:quote])
        try:
            # The C string scanner skips the string, escapes and all, in one call.
            _, pos = scanstring(text, quote + 1)
        except ValueError:
            # A bad string: json.loads stops there too, after recursing through
            # whatever opened before it, so only that part counts.
            pos = len(text)
            break
    outside.append(text[pos:])
    # Brackets are ASCII, and UTF-8 never uses ASCII bytes inside other characters.
    brackets = "".join(outside).encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    if len(brackets) <= limit:
        return False  # as above, now without the brackets inside strings
    depths = _STEPS[np.frombuffer(brackets, dtype=np.uint8)].cumsum()
    return int(depths.max()) > limit


def loads(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that raises ``MalformedFrame`` for bad or too deeply nested JSON."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedFrame("not UTF-8 text") from exc
    if nesting_exceeds(data, max_depth):
        raise MalformedFrame(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise MalformedFrame(f"not JSON: {exc.msg}") from exc


def store_id(value: object) -> int | None:
    """``value`` when it is an id the store can hold (a positive 64-bit integer), else None."""
    # bool is an int in Python; true is not an id.
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_ID:
        return value
    return None


def storable(text: str) -> str:
    """``text`` with lone surrogates and NULs replaced by U+FFFD, so any store takes it."""
    if _UNSTORABLE.search(text) is None:
        return text
    # A pair split into two code points is joined; a lone half becomes U+FFFD.
    joined = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return joined.replace("\x00", "\ufffd")
