"""Precision and recall of a no-model rule set on a labelled set of messages
(the lessons, focus and decision extractors' evaluate modules)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Score:
    messages: int
    true_positives: int
    false_positives: int
    false_negatives: int
    misses: tuple[str, ...]

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 1.0

    @property
    def recall(self) -> float:
        wanted = self.true_positives + self.false_negatives
        return self.true_positives / wanted if wanted else 1.0

    def as_json(self) -> dict[str, object]:
        return {
            "messages": self.messages,
            "precision": round(self.precision, 3),
            "recall": round(self.recall, 3),
            "true_positives": self.true_positives,
            "false_positives": self.false_positives,
            "false_negatives": self.false_negatives,
        }
