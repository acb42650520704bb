"""Precision and recall of the focus and decision rules on labelled JSONL sets.

Each line: ``{"text": ..., "focus": true|false}`` or ``{"text": ..., "decision":
true|false}``, with ``"must": [words]`` for a positive. A find is right when the
message is a positive and the found text holds every ``must`` phrase
(case-insensitive); a find for a negative, or one missing a phrase, is a false
positive (and, for a positive, a miss too). ``labelled.jsonl`` is what the rules
were tuned on; ``heldout.jsonl`` was written before and never tuned on.
"""

from __future__ import annotations

import json
from pathlib import Path

from memory.continuity.rules import decisions_of, focus_of
from memory.scores import Score

LABELLED = Path(__file__).with_name("labelled.jsonl")
HELD_OUT = Path(__file__).with_name("heldout.jsonl")
KINDS = ("focus", "decision")


def found_text(kind: str, text: str) -> str:
    if kind == "focus":
        focus = focus_of(text)
        return focus.text if focus is not None else ""
    return " | ".join(d.text for d in decisions_of(text))


def score_file(path: Path, kind: str) -> Score:
    tp = fp = fn = 0
    misses: list[str] = []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [row for row in rows if kind in row]
    for row in rows:
        found = found_text(kind, row["text"])
        if row[kind]:
            if found and all(w.lower() in found.lower() for w in row.get("must", [])):
                tp += 1
                continue
            fn += 1
            if found:
                fp += 1
            misses.append(f"missed: {row['text']!r} -> {found!r}")
        elif found:
            fp += 1
            misses.append(f"false: {row['text']!r} -> {found!r}")
    return Score(len(rows), tp, fp, fn, tuple(misses))


if __name__ == "__main__":
    import sys

    for name, path in (("tuned", LABELLED), ("held_out", HELD_OUT)):
        for kind in KINDS:
            result = score_file(path, kind)
            sys.stdout.write(f"{name} {kind} {json.dumps(result.as_json())}\n")
            for miss in result.misses:
                sys.stdout.write(f"   {miss}\n")
