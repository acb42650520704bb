"""The injection score of a candidate memory (Agent Memory §5.1, MemOS WeightedMemory).

``score = w_sim·similarity + w_pri·priority + w_rec·recency + w_freq·frequency``,
each signal in [0, 1]: similarity is the fused relevance to the message,
priority the explicit priority raised to its type's floor, recency the
retention of ``memory.decay``, frequency a saturating count of accesses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class ScoreWeights:
    similarity: float
    priority: float
    recency: float
    frequency: float

    def normalised(self) -> ScoreWeights:
        total = self.similarity + self.priority + self.recency + self.frequency
        if total <= 0:
            raise ValueError("score weights must not all be zero")
        return ScoreWeights(
            self.similarity / total,
            self.priority / total,
            self.recency / total,
            self.frequency / total,
        )


@dataclass(frozen=True)
class Signals:
    """One candidate's signals (a row of ``SignalColumns``)."""

    similarity: float
    priority: float
    recency: float
    frequency: float

    def as_dict(self) -> dict[str, float]:
        return {
            "similarity": round(self.similarity, 4),
            "priority": round(self.priority, 4),
            "recency": round(self.recency, 4),
            "frequency": round(self.frequency, 4),
        }


@dataclass(frozen=True)
class SignalColumns:
    """The signals of every candidate of a pack, an entry per candidate in each array:
    a pack scores a hundred candidates at once."""

    similarity: NDArray[np.float64]
    priority: NDArray[np.float64]
    recency: NDArray[np.float64]
    frequency: NDArray[np.float64]

    def row(self, index: int) -> Signals:
        return Signals(
            similarity=float(self.similarity[index]),
            priority=float(self.priority[index]),
            recency=float(self.recency[index]),
            frequency=float(self.frequency[index]),
        )

    def scores(self, weights: ScoreWeights) -> NDArray[np.float64]:
        """Each candidate's weighted sum of its signals."""
        return (
            weights.similarity * self.similarity
            + weights.priority * self.priority
            + weights.recency * self.recency
            + weights.frequency * self.frequency
        )


def frequency_signal(access_counts: NDArray[np.float64], half_count: float) -> NDArray[np.float64]:
    """0 for never used, 0.5 at ``half_count`` accesses, towards 1 after (per entry)."""
    counts = np.maximum(0.0, access_counts)
    return counts / (counts + half_count)
