"""The shared rules for untrusted input: JSON depth, ids, storable text."""

from __future__ import annotations

import json

import pytest

from gateway.errors import MalformedFrame
from gateway.untrusted import MAX_ID, loads, nesting_exceeds, storable, store_id


@pytest.mark.parametrize(
    ("text", "deeper_than_3"),
    [
        ("[[[]]]", False),
        ("[[[[]]]]", True),
        ('{"a": {"b": {"c": {}}}}', True),
        ('{"a": {"b": {"c": 1}}}', False),
        # Brackets inside strings do not nest, escaped quotes included.
        ('["[[[[[[", "\\"[[[[[[", {"x": "]]]]{{{{"}]', False),
        ('[[["\\\\"], [[]]]]', True),
        # Wide is not deep.
        ("[" + ",".join(["[[]]"] * 500) + "]", False),
        # Openers before a broken string still recurse json.loads: they count.
        ('[[[[[ "unterminated', True),
        ('[ "bad \x01 string" [[[[[[', False),
        # Not JSON outside strings (a lone surrogate too) does not break the scan.
        ("[\ud800[[[", True),
    ],
)
def test_nesting_exceeds(text: str, deeper_than_3: bool) -> None:
    assert nesting_exceeds(text, 3) is deeper_than_3


def test_loads_refuses_what_json_loads_would_recurse_to_death_on() -> None:
    for data in ("[" * 100_000, "[" * 5000 + "]" * 5000, '{"a":' * 5000 + "1" + "}" * 5000):
        with pytest.raises(MalformedFrame, match="nested deeper than 32"):
            loads(data)
    nested = [[[[{"a": [1]}]]]]
    assert loads(json.dumps(nested)) == nested
    assert loads(json.dumps(nested).encode()) == nested
    with pytest.raises(MalformedFrame, match="not UTF-8"):
        loads(b"\xff")
    with pytest.raises(MalformedFrame, match="not JSON"):
        loads("{")


def test_store_id() -> None:
    assert store_id(1) == 1
    assert store_id(MAX_ID) == MAX_ID
    for value in (0, -1, MAX_ID + 1, 10**26, True, 1.0, "1", None):
        assert store_id(value) is None, value


def test_storable_replaces_what_no_store_encodes() -> None:
    assert storable("plain ü 😀") == "plain ü 😀"
    assert storable("hi \ud800 there\x00!") == "hi \ufffd there\ufffd!"
    assert storable("\udc00\ud800") == "\ufffd\ufffd"
    # A pair split in two code points is the character it encodes.
    assert storable("\ud83d\ude00") == "😀"
    storable("x\ud800" * 1000).encode("utf-8")  # encodes now
