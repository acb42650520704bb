"""Precision and recall of the no-model extractor on a labelled JSONL set.

Each line: ``{"text": ..., "lesson": true|false, "must": [words]}``. A lesson
counts as right when the message is a correction and the lesson holds every
``must`` word (case-insensitive); a lesson for a non-correction, or one that
misses a word, is a false positive (and, for a correction, a miss too).
"""

from __future__ import annotations

import json
from pathlib import Path

from memory.scores import Score
from persona.lessons.extract import extract

LABELLED = Path(__file__).with_name("labelled.jsonl")
HELD_OUT = Path(__file__).with_name("heldout.jsonl")


def score_file(path: Path) -> Score:
    tp = fp = fn = 0
    misses: list[str] = []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in lines:
        found = extract(row["text"])
        text = " ".join(c.text for c in found).lower()
        if row["lesson"]:
            if found and all(word.lower() in text for word in row.get("must", [])):
                tp += 1
                continue
            fn += 1
            if found:
                fp += 1
            misses.append(f"missed: {row['text']!r} -> {text!r}")
        elif found:
            fp += 1
            misses.append(f"false: {row['text']!r} -> {text!r}")
    return Score(len(lines), tp, fp, fn, tuple(misses))


if __name__ == "__main__":
    import sys

    for name, path in (("tuned", LABELLED), ("held_out", HELD_OUT)):
        result = score_file(path)
        sys.stdout.write(f"{name} {json.dumps(result.as_json())}\n")
        for miss in result.misses:
            sys.stdout.write(f"   {miss}\n")
